package volumeplugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	k8svolume "k8s.io/kubernetes/pkg/volume"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

const testUID = "3f1c9a52-7d4e-4b7a-9c21-6e5d2f1a7b90"

// newPlugin returns the adapter initialised by the kubelet's
// VolumePluginMgr, as a kubelet does, on a fake host rooted at root.
func newPlugin(t *testing.T, root string, opts ...Option) *Plugin {
	t.Helper()
	var mgr k8svolume.VolumePluginMgr
	if err := mgr.InitPlugins(ProbeVolumePlugins(opts...), nil, volumetest.NewFakeVolumeHost(t, root, nil, nil)); err != nil {
		t.Fatal(err)
	}
	found, err := mgr.FindPluginByName(PluginName)
	if err != nil {
		t.Fatal(err)
	}
	spec := k8svolume.NewSpecFromVolume(&v1.Volume{Name: "x", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	if bySpec, err := mgr.FindPluginBySpec(spec); err != nil || bySpec != found {
		t.Fatalf("FindPluginBySpec(emptyDir) = %v, %v; want the adapter", bySpec, err)
	}
	return found.(*Plugin)
}

func testPod(containers ...v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(testUID), Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Containers: containers}}
}

func emptyDirSpec(name string, src v1.EmptyDirVolumeSource) *k8svolume.Spec {
	return k8svolume.NewSpecFromVolume(&v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &src}})
}

func TestDefaultVolumeLifecycle(t *testing.T) {
	root := t.TempDir()
	p := newPlugin(t, root)
	m, err := p.NewMounter(emptyDirSpec("cache", v1.EmptyDirVolumeSource{}), testPod())
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "pods", testUID, "volumes", "kubernetes.io~empty-dir", "cache")
	if m.GetPath() != want {
		t.Fatalf("GetPath = %s; want %s", m.GetPath(), want)
	}
	if a := m.GetAttributes(); a.ReadOnly || !a.Managed || !a.SELinuxRelabel {
		t.Errorf("GetAttributes = %+v", a)
	}
	if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(want)
	if err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("volume directory: %v, %v; want mode 0777", fi, err)
	}
	if _, err := os.Stat(filepath.Join(root, "pods", testUID, "plugins", "kubernetes.io~empty-dir", "cache", "ready")); err != nil {
		t.Errorf("ready marker: %v", err)
	}
	mounttest.Build(t, want, "file a "+strings.Repeat("x", 10000))
	metrics, err := m.GetMetrics()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(want, &st); err != nil {
		t.Fatal(err)
	}
	if metrics.Used.Value() < 10000 || metrics.InodesUsed.Value() != 2 || metrics.Capacity.Value() != int64(st.Blocks)*int64(st.Bsize) ||
		metrics.Inodes.Value() != int64(st.Files) || metrics.Available.Value() <= 0 || metrics.InodesFree.Value() <= 0 {
		t.Errorf("GetMetrics = used %v, inodes %v, capacity %v, available %v, inodes %v free %v; want the volume's use and its filesystem's size",
			metrics.Used, metrics.InodesUsed, metrics.Capacity, metrics.Available, metrics.Inodes, metrics.InodesFree)
	}

	// Reconstruction after a restart.
	rec, err := p.ConstructVolumeSpec("cache", want)
	if err != nil || rec.Spec.Name() != "cache" || rec.Spec.Volume.EmptyDir == nil || rec.Spec.Volume.EmptyDir.Medium != v1.StorageMediumDefault {
		t.Errorf("ConstructVolumeSpec = %+v, %v; want a Default emptyDir named cache", rec.Spec, err)
	}

	u, err := p.NewUnmounter("cache", types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.TearDownAt(filepath.Join(root, "elsewhere")); !errors.Is(err, ErrOtherDirectory) {
		t.Errorf("TearDownAt(another directory) = %v; want ErrOtherDirectory", err)
	}
	if err := u.TearDownAt(want + "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(want); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory after TearDown: %v", err)
	}
	if err := u.TearDown(); err != nil {
		t.Errorf("second TearDown = %v; want nothing-there success", err)
	}
}

// TestTearDownRefusesNestedMount is the promise, through the kubelet's
// interface: a share mounted inside the volume is never emptied.
func TestTearDownRefusesNestedMount(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	p := newPlugin(t, root)
	m, err := p.NewMounter(emptyDirSpec("cache", v1.EmptyDirVolumeSource{}), testPod())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	nas := filepath.Join(m.GetPath(), "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	sentinels := mounttest.Sentinels(t, nas)
	u, err := p.NewUnmounter("cache", types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	err = u.TearDown()
	if !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown with a NAS inside = %v; want a refusal matching mountdetect.ErrCrossesMount", err)
	}
	mounttest.Intact(t, nas, sentinels)
}

func TestMemoryVolumeAndResize(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	p := newPlugin(t, root)
	limit := resource.MustParse("64Mi")
	pod := testPod(v1.Container{Name: "c", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("32Mi")}}})
	spec := emptyDirSpec("mem", v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &limit})
	m, err := p.NewMounter(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	// The pod's limit (32Mi) is below the volume's sizeLimit (64Mi).
	if got := tmpfsSize(t, m.GetPath()); got != 32<<20 {
		t.Errorf("tmpfs size = %d; want the pod's memory limit, 32Mi", got)
	}
	metrics, err := m.GetMetrics()
	if err != nil || metrics.Capacity.Value() != 32<<20 {
		t.Errorf("GetMetrics = %+v, %v; want the tmpfs's 32Mi capacity", metrics, err)
	}
	rec, err := p.ConstructVolumeSpec("mem", m.GetPath())
	if err != nil || rec.Spec.Volume.EmptyDir.Medium != v1.StorageMediumMemory {
		t.Errorf("ConstructVolumeSpec = %+v, %v; want Memory", rec.Spec, err)
	}

	// Resize through the kubelet's interface.
	bigger := resource.MustParse("48Mi")
	if err := p.ResizeEphemeralVolume(spec, pod, &bigger); err != nil {
		t.Fatalf("ResizeEphemeralVolume(48Mi) = %v", err)
	}
	if got := tmpfsSize(t, m.GetPath()); got != 48<<20 {
		t.Errorf("tmpfs size after resize = %d; want 48Mi", got)
	}
	for _, tc := range []struct {
		name string
		spec *k8svolume.Spec
		size *resource.Quantity
	}{
		{"nil size", spec, nil},
		{"zero size", spec, resource.NewQuantity(0, resource.BinarySI)},
		{"Default medium", emptyDirSpec("mem", v1.EmptyDirVolumeSource{}), &bigger},
		{"not an emptyDir", k8svolume.NewSpecFromVolume(&v1.Volume{Name: "mem"}), &bigger},
	} {
		if err := p.ResizeEphemeralVolume(tc.spec, pod, tc.size); err == nil {
			t.Errorf("ResizeEphemeralVolume(%s) succeeded; want an error", tc.name)
		}
	}
	if got := tmpfsSize(t, m.GetPath()); got != 48<<20 {
		t.Errorf("tmpfs size after refused resizes = %d; want 48Mi still", got)
	}

	u, err := p.NewUnmounter("mem", types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.TearDown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(m.GetPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory after TearDown: %v", err)
	}
}

// tmpfsSize is the size= of the tmpfs mounted at dir, from the kernel.
func tmpfsSize(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("%s is not on a tmpfs", dir)
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

func TestPodOf(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PodLevelResources, true)
	pod := testPod(
		v1.Container{Name: "a", Resources: v1.ResourceRequirements{
			Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi"), "hugepages-2Mi": resource.MustParse("100Mi")},
			Requests: v1.ResourceList{"hugepages-2Mi": resource.MustParse("100Mi")},
		}},
		v1.Container{Name: "b", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi")}}},
	)
	got := PodOf(pod)
	if got.UID != testUID || got.Namespace != "ns" || got.Name != "p" {
		t.Errorf("PodOf identity = %+v", got)
	}
	if got.MemoryLimit != 1536<<20 {
		t.Errorf("MemoryLimit = %d; want the sum of the containers' limits, 1.5Gi", got.MemoryLimit)
	}
	if len(got.HugePages) != 1 || got.HugePages[2<<20] != 100<<20 {
		t.Errorf("HugePages = %v; want the container's 2Mi", got.HugePages)
	}
	// Pod-level resources (PodLevelResources): their requests count, and
	// their limits are the pod's.
	pod.Spec.Resources = &v1.ResourceRequirements{
		Requests: v1.ResourceList{"hugepages-1Gi": resource.MustParse("2Gi")},
		Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("3Gi"), "hugepages-1Gi": resource.MustParse("2Gi")},
	}
	got = PodOf(pod)
	if got.MemoryLimit != 3<<30 {
		t.Errorf("MemoryLimit with a pod-level limit = %d; want 3Gi", got.MemoryLimit)
	}
	if len(got.HugePages) != 2 || got.HugePages[2<<20] != 100<<20 || got.HugePages[1<<30] != 2<<30 {
		t.Errorf("HugePages = %v; want 2Mi and (pod level) 1Gi", got.HugePages)
	}
	// A container without a memory limit makes the pod's unlimited.
	pod.Spec.Resources = nil
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "c"})
	if got := PodOf(pod); got.MemoryLimit != 0 {
		t.Errorf("MemoryLimit with an unlimited container = %d; want 0", got.MemoryLimit)
	}
}

func TestSpecOf(t *testing.T) {
	limit := resource.MustParse("1Gi")
	got := SpecOf(emptyDirSpec("v", v1.EmptyDirVolumeSource{Medium: "HugePages-2Mi", SizeLimit: &limit}))
	if got.Name != "v" || got.EmptyDir.Medium != "HugePages-2Mi" || got.EmptyDir.SizeLimit != 1<<30 {
		t.Errorf("SpecOf = %+v %+v", got, got.EmptyDir)
	}
	if got := SpecOf(k8svolume.NewSpecFromVolume(&v1.Volume{Name: "w"})); got.EmptyDir == nil || got.EmptyDir.Medium != "" {
		t.Errorf("SpecOf(no source) = %+v; want a Default emptyDir", got)
	}
}

func TestKubeletError(t *testing.T) {
	cause := errors.New("mount went wrong")
	uncertain := kubeletError(&volume.OperationError{Kind: volume.Uncertain, Op: "SetUp", Path: "/x", Err: cause})
	if !volumetypes.IsUncertainProgressError(uncertain) || !strings.Contains(uncertain.Error(), "mount went wrong") {
		t.Errorf("Uncertain → %T %v; want an UncertainProgressError with the message", uncertain, uncertain)
	}
	transient := &volume.OperationError{Kind: volume.Transient, Op: "SetUp", Path: "/x", Err: cause}
	if got := kubeletError(transient); got != error(transient) {
		t.Errorf("Transient → %v; want it unchanged", got)
	}
}

func TestNotInitialized(t *testing.T) {
	p := New()
	if _, err := p.NewMounter(emptyDirSpec("v", v1.EmptyDirVolumeSource{}), testPod()); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("NewMounter before Init = %v", err)
	}
	if _, err := p.GetVolumeName(k8svolume.NewSpecFromVolume(&v1.Volume{Name: "v"})); err == nil {
		t.Error("GetVolumeName(not an emptyDir) succeeded")
	}
}

func TestVolumeMode(t *testing.T) {
	mode := int32(0o1750)
	spec := emptyDirSpec("v", v1.EmptyDirVolumeSource{Mode: &mode})
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EmptyDirVolumeMode, false)
	if got := SpecOf(spec); got.EmptyDir.Mode != nil {
		t.Errorf("SpecOf with EmptyDirVolumeMode off: Mode = %o; want nil", *got.EmptyDir.Mode)
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EmptyDirVolumeMode, true)
	if got := SpecOf(spec); got.EmptyDir.Mode == nil || *got.EmptyDir.Mode != 0o1750 {
		t.Fatalf("SpecOf with EmptyDirVolumeMode on: Mode = %v; want 01750", got.EmptyDir.Mode)
	}
	root := t.TempDir()
	p := newPlugin(t, root)
	m, err := p.NewMounter(spec, testPod())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(m.GetPath())
	if err != nil || fi.Mode().Perm() != 0o750 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("volume directory mode = %v, %v; want 01750", fi.Mode(), err)
	}
	rec, err := p.ConstructVolumeSpec("v", m.GetPath())
	if err != nil || rec.Spec.Volume.EmptyDir.Mode == nil || *rec.Spec.Volume.EmptyDir.Mode != 0o1750 {
		t.Errorf("ConstructVolumeSpec = %+v, %v; want Mode 01750", rec.Spec.Volume.EmptyDir, err)
	}
	bad := int32(-1)
	if m, err := p.NewMounter(emptyDirSpec("w", v1.EmptyDirVolumeSource{Mode: &bad}), testPod()); err == nil {
		if err := m.SetUp(k8svolume.MounterArgs{}); err == nil {
			t.Error("SetUp with mode -1 succeeded")
		}
	}
}
