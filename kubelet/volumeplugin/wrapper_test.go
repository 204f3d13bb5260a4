package volumeplugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8svolume "k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/projected"
	"k8s.io/kubernetes/pkg/volume/secret"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// secretEnv is upstream's secret plugin and nodevol's adapter as the
// emptyDir plugin, in one plugin manager of a fake host (whose
// NewWrapperMounter and NewWrapperUnmounter find the emptyDir plugin
// through that manager and name the wrapper "wrapped_<volume>", as the
// kubelet's do), with a fake API server holding one Secret.
type secretEnv struct {
	root   string
	secret k8svolume.VolumePlugin
	nv     *Plugin
	pod    *v1.Pod
	spec   *k8svolume.Spec
}

func newSecretEnv(t *testing.T) *secretEnv {
	t.Helper()
	root := t.TempDir()
	s := &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Data:       map[string][]byte{"username": []byte("admin"), "password": []byte("hunter2")},
	}
	host := volumetest.NewFakeVolumeHost(t, root, fake.NewClientset(s), append(secret.ProbeVolumePlugins(), ProbeVolumePlugins()...))
	mgr := host.GetPluginMgr()
	sp, err := mgr.FindPluginByName("kubernetes.io/secret")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := mgr.FindPluginByName(PluginName)
	if err != nil {
		t.Fatal(err)
	}
	mode := int32(0o644) // the API server's default
	vol := v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "db", DefaultMode: &mode}}}
	pod := testPod()
	pod.Spec.Volumes = []v1.Volume{vol}
	return &secretEnv{root: root, secret: sp, nv: ep.(*Plugin), pod: pod, spec: k8svolume.NewSpecFromVolume(&vol)}
}

func (e *secretEnv) dir() string {
	return filepath.Join(e.root, "pods", testUID, "volumes", "kubernetes.io~secret", "creds")
}

func (e *secretEnv) metaDir() string {
	return filepath.Join(e.root, "pods", testUID, "plugins", "kubernetes.io~empty-dir", "wrapped_creds")
}

func (e *secretEnv) setUp(t *testing.T) {
	t.Helper()
	m, err := e.secret.NewMounter(e.spec, e.pod)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetPath() != e.dir() {
		t.Fatalf("secret GetPath = %s; want %s", m.GetPath(), e.dir())
	}
	if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatalf("secret SetUp = %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(e.dir(), unix.MNT_DETACH) }) // only if a failure left it
}

func (e *secretEnv) tearDown() error {
	u, err := e.secret.NewUnmounter("creds", types.UID(testUID))
	if err != nil {
		return err
	}
	return u.TearDown()
}

type mountAt struct{ FSType, Source string }

// mountsAt lists the mounts on dir, bottom first, from
// /proc/self/mountinfo (the test paths need no unescaping).
func mountsAt(t *testing.T, dir string) []mountAt {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []mountAt
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 2 && f[4] == dir {
			out = append(out, mountAt{FSType: g[0], Source: g[1]})
		}
	}
	return out
}

// TestSecretVolumeThroughAdapter drives the adapter exactly as the
// kubelet's secret plugin does: SetUp makes the wrapper mounter
// (NewWrapperMounter: "wrapped_creds") and calls its SetUpAt on the
// secret's directory; TearDown goes through UnmountViaEmptyDir
// (NewWrapperUnmounter, TearDownAt).
func TestSecretVolumeThroughAdapter(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newSecretEnv(t)
	// What must not change: a sibling tree under the root and an
	// ordinary emptyDir of the same pod.
	outside := filepath.Join(e.root, "outside")
	wantOutside := mounttest.Sentinels(t, outside)
	om, err := e.nv.NewMounter(emptyDirSpec("cache", v1.EmptyDirVolumeSource{}), e.pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := om.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	wantCache := mounttest.Sentinels(t, om.GetPath())

	e.setUp(t)
	ms := mountsAt(t, e.dir())
	if len(ms) != 1 || ms[0].FSType != "tmpfs" || !strings.HasPrefix(ms[0].Source, "nv-") {
		t.Fatalf("mounts at %s = %+v; want one tmpfs", e.dir(), ms)
	}
	b, err := os.ReadFile(filepath.Join(e.dir(), "password"))
	if err != nil || string(b) != "hunter2" {
		t.Fatalf("password = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(e.metaDir(), "ready")); err != nil {
		t.Fatalf("ready marker: %v", err)
	}
	// The kubelet sets a secret volume up again on every resync.
	e.setUp(t)
	if n := len(mountsAt(t, e.dir())); n != 1 {
		t.Fatalf("%d mounts after a second SetUp; want 1", n)
	}

	if err := e.tearDown(); err != nil {
		t.Fatalf("secret TearDown = %v", err)
	}
	if n := len(mountsAt(t, e.dir())); n != 0 {
		t.Errorf("%d mounts left at %s", n, e.dir())
	}
	for _, p := range []string{e.dir(), e.metaDir()} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there (%v)", p, err)
		}
	}
	mounttest.Intact(t, outside, wantOutside)
	mounttest.Intact(t, om.GetPath(), wantCache)
	if err := e.tearDown(); err != nil {
		t.Errorf("second secret TearDown = %v", err)
	}
}

// TestSecretVolumeNestedMountRefused: a NAS mounted inside the secret's
// tmpfs is never emptied; the secret's teardown is refused until it goes.
func TestSecretVolumeNestedMountRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newSecretEnv(t)
	e.setUp(t)
	nas := filepath.Join(e.dir(), "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	want := mounttest.Sentinels(t, nas)
	if err := e.tearDown(); !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("secret TearDown with a NAS inside = %v; want a refusal", err)
	}
	mounttest.Intact(t, nas, want)
	if _, err := os.Stat(filepath.Join(e.metaDir(), "ready")); err != nil {
		t.Fatalf("a refused teardown removed the ready marker: %v", err)
	}
	mounttest.Unmount(t, nas)
	if err := e.tearDown(); err != nil {
		t.Fatalf("secret TearDown after the NAS went = %v", err)
	}
	if n := len(mountsAt(t, e.dir())); n != 0 {
		t.Errorf("%d mounts left", n)
	}
}

// TestSecretVolumeForeignMountRefused: a tmpfs on the secret's directory
// that nodevol did not make is never unmounted.
func TestSecretVolumeForeignMountRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newSecretEnv(t)
	mounttest.Tmpfs(t, e.dir(), "size=1m")
	want := mounttest.Sentinels(t, e.dir())
	if err := e.tearDown(); !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("secret TearDown of a foreign tmpfs = %v; want a refusal", err)
	}
	mounttest.Intact(t, e.dir(), want)
}

// TestWrapperDirectories: what SetUpAt and TearDownAt accept and refuse.
func TestWrapperDirectories(t *testing.T) {
	root := t.TempDir()
	p := newPlugin(t, root)
	wrapped := emptyDirSpec("wrapped_creds", v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory})
	m, err := p.NewMounter(wrapped, testPod())
	if err != nil {
		t.Fatalf("NewMounter(wrapped_creds) = %v; want a mounter for SetUpAt", err)
	}
	if err := m.SetUp(k8svolume.MounterArgs{}); !errors.Is(err, volume.ErrInvalidName) {
		t.Errorf("SetUp of wrapped_creds on its own path = %v; want volume.ErrInvalidName", err)
	}
	if _, err := m.GetMetrics(); !errors.Is(err, emptydir.ErrLocatedUnsupported) {
		t.Errorf("GetMetrics of wrapped_creds = %v; want emptydir.ErrLocatedUnsupported", err)
	}
	u, err := p.NewUnmounter("wrapped_creds", types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	pods := filepath.Join(root, "pods")
	for _, dir := range []string{
		filepath.Join(pods, "0000-other-pod", "volumes", "kubernetes.io~secret", "creds"),
		filepath.Join(pods, testUID, "volumes", "kubernetes.io~empty-dir", "other"),
		filepath.Join(pods, testUID, "volumes", "kubernetes.io~secret", "creds", "sub"),
		filepath.Join(pods, testUID, "volumes", "kubernetes.io~secret", ".."),
		filepath.Join(t.TempDir(), "pods", testUID, "volumes", "kubernetes.io~secret", "creds"),
		"relative/dir",
	} {
		if err := m.SetUpAt(dir, k8svolume.MounterArgs{}); !errors.Is(err, ErrOtherDirectory) {
			t.Errorf("SetUpAt(%s) = %v; want ErrOtherDirectory", dir, err)
		}
		if err := u.TearDownAt(dir); !errors.Is(err, ErrOtherDirectory) {
			t.Errorf("TearDownAt(%s) = %v; want ErrOtherDirectory", dir, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(pods, testUID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused SetUpAt created the pod directory (%v)", err)
	}
	// A wrapper mounter without the "wrapped_" prefix (the kubelet's and
	// the fake host's both add it): its name could be an ordinary
	// volume's metadata, so the location is refused.
	plain, err := p.NewMounter(emptyDirSpec("creds", v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}), testPod())
	if err != nil {
		t.Fatal(err)
	}
	secretDir := filepath.Join(pods, testUID, "volumes", "kubernetes.io~secret", "creds")
	if err := plain.SetUpAt(secretDir, k8svolume.MounterArgs{}); !errors.Is(err, emptydir.ErrInvalidLocation) {
		t.Errorf("SetUpAt(%s) by the mounter named creds = %v; want emptydir.ErrInvalidLocation", secretDir, err)
	}
	pu, err := p.NewUnmounter("creds", types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	if err := pu.TearDownAt(secretDir); !errors.Is(err, emptydir.ErrInvalidLocation) {
		t.Errorf("TearDownAt(%s) by the unmounter named creds = %v; want emptydir.ErrInvalidLocation", secretDir, err)
	}
}

// TestProjectedVolumeThroughAdapter: the projected plugin (every pod's
// kube-api-access volume is one) through the same wrapper, here with a
// configMap and a downwardAPI projection, on the fake kubelet host the
// projected plugin needs (its wrapper methods are the fake host's).
func TestProjectedVolumeThroughAdapter(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "CERT"}}
	host := volumetest.NewFakeKubeletVolumeHost(t, root, fake.NewClientset(cm), append(projected.ProbeVolumePlugins(), ProbeVolumePlugins()...))
	plug, err := host.GetPluginMgr().FindPluginByName("kubernetes.io/projected")
	if err != nil {
		t.Fatal(err)
	}
	mode := int32(0o644)
	vol := v1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
	pod := testPod()
	pod.Spec.Volumes = []v1.Volume{vol}
	m, err := plug.NewMounter(k8svolume.NewSpecFromVolume(&vol), pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "pods", testUID, "volumes", "kubernetes.io~projected", vol.Name)
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // only if a failure left it
	if err := m.SetUp(k8svolume.MounterArgs{}); err != nil {
		t.Fatalf("projected SetUp = %v", err)
	}
	if ms := mountsAt(t, dir); len(ms) != 1 || !strings.HasPrefix(ms[0].Source, "nv-") {
		t.Fatalf("mounts at %s = %+v; want nodevol's tmpfs", dir, ms)
	}
	for name, want := range map[string]string{"ca.crt": "CERT", "namespace": "ns"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	meta := filepath.Join(root, "pods", testUID, "plugins", "kubernetes.io~empty-dir", "wrapped_"+vol.Name)
	u, err := plug.NewUnmounter(vol.Name, types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.TearDown(); err != nil {
		t.Fatalf("projected TearDown = %v", err)
	}
	if n := len(mountsAt(t, dir)); n != 0 {
		t.Errorf("%d mounts left at %s", n, dir)
	}
	for _, p := range []string{dir, meta} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there (%v)", p, err)
		}
	}
}
