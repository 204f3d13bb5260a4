//go:build linux

package emptydir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
	mount "k8s.io/mount-utils"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

const testUID = "8a3f0c52-1d4e-4b7a-9c21-6e5d2f1a7b90"

type env struct {
	ctx    context.Context
	root   string
	layout volume.Layout
	plugin *Plugin
}

func newEnv(t *testing.T, root string, mounter volume.SystemMounter, opts ...Option) *env {
	t.Helper()
	l, err := volume.NewLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	return &env{root: root, layout: l, plugin: New(volume.NewHost(l, mounter, 8<<30), opts...), ctx: testContext(t)}
}

func (e *env) pod(vols ...volume.Spec) *volume.Pod {
	return &volume.Pod{UID: testUID, Namespace: "default", Name: "web", Volumes: vols}
}

func (e *env) setUp(t *testing.T, pod *volume.Pod, name string) volume.Mounter {
	t.Helper()
	m, err := e.plugin.NewMounter(pod.Volume(name), pod)
	if err != nil {
		t.Fatalf("NewMounter(%s): %v", name, err)
	}
	if err := m.SetUp(testContext(t), volume.MounterArgs{}); err != nil {
		t.Fatalf("SetUp(%s): %v", name, err)
	}
	return m
}

func (e *env) tearDown(name string) error {
	u, err := e.plugin.NewUnmounter(name, testUID)
	if err != nil {
		return err
	}
	return u.TearDown(e.ctx)
}

// testContext carries a logger that writes to t.Log.
func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func (e *env) metaDir(t *testing.T, name string) string {
	t.Helper()
	d, err := e.layout.PluginVolumeDir(testUID, PluginName, name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustNotExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists (%v)", p, err)
	}
}

func emptyDirSpec(name string, medium volume.StorageMedium) volume.Spec {
	return volume.Spec{Name: name, EmptyDir: &volume.EmptyDirSource{Medium: medium}}
}

func TestSetUpDefault(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	old := syscall.Umask(0o077) // SetUp must not depend on the umask
	defer syscall.Umask(old)
	pod := e.pod(emptyDirSpec("cache", ""), volume.Spec{Name: "shared", EmptyDir: &volume.EmptyDirSource{StickyBit: true}})
	m := e.setUp(t, pod, "cache")
	want := filepath.Join(e.root, "pods", testUID, "volumes/kubernetes.io~empty-dir/cache")
	if m.Path() != want {
		t.Errorf("Path = %s; want %s", m.Path(), want)
	}
	fi, err := os.Stat(want)
	if err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky != 0 {
		t.Errorf("volume dir mode = %v, %v; want drwxrwxrwx", fi.Mode(), err)
	}
	meta := e.metaDir(t, "cache")
	if !isReady(meta) {
		t.Error("no ready marker")
	}
	if fi, err := os.Stat(meta); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("metadata dir mode = %v, %v; want 0750", fi.Mode(), err)
	}
	md, err := readMetadata(meta)
	if err != nil || md == nil || md.Medium != volume.MediumDefault {
		t.Errorf("metadata = %+v, %v", md, err)
	}
	s := e.setUp(t, pod, "shared")
	if fi, _ := os.Stat(s.Path()); fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("sticky volume mode = %v; want drwxrwxrwt", fi.Mode())
	}

	// Idempotent: a second SetUp changes nothing and keeps the files.
	os.WriteFile(filepath.Join(want, "data"), []byte("x"), 0o644)
	e.setUp(t, pod, "cache")
	if _, err := os.Stat(filepath.Join(want, "data")); err != nil {
		t.Errorf("second SetUp lost data: %v", err)
	}
	// A ready marker whose directory vanished is repaired.
	os.RemoveAll(want)
	e.setUp(t, pod, "cache")
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
		t.Errorf("SetUp did not repair the vanished directory: %v", err)
	}
}

func TestTearDownDefault(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	snap := mounttest.Sentinels(t, outside)
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	pod := e.pod(emptyDirSpec("cache", ""))
	m := e.setUp(t, pod, "cache")
	mounttest.Build(t, m.Path(), "file a/b/c data", "symlink out "+outside, "symlink a/file-out "+filepath.Join(outside, "important.txt"))
	if err := e.tearDown("cache"); err != nil {
		t.Fatalf("TearDown = %v", err)
	}
	mustNotExist(t, m.Path())
	mustNotExist(t, e.metaDir(t, "cache"))
	mounttest.Intact(t, outside, snap)
	// Idempotent.
	if err := e.tearDown("cache"); err != nil {
		t.Fatalf("second TearDown = %v", err)
	}
}

func TestTearDownMissingVolumeRemovesLeftoverMetadata(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	m := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	os.Remove(m.Path())
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, e.metaDir(t, "cache"))
}

func TestKubeletRootThroughSymlink(t *testing.T) {
	base := t.TempDir()
	mounttest.Build(t, base, "dir data/kubelet", "symlink kubelet data/kubelet")
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	pod := e.pod(emptyDirSpec("cache", ""))
	m := e.setUp(t, pod, "cache")
	if _, err := os.Stat(filepath.Join(base, "data/kubelet/pods", testUID, "volumes/kubernetes.io~empty-dir/cache")); err != nil {
		t.Fatalf("volume not under the symlink target: %v", err)
	}
	spec, err := e.plugin.ConstructSpec("cache", m.Path())
	if err != nil || spec.EmptyDir == nil || spec.EmptyDir.Medium != "" {
		t.Errorf("ConstructSpec = %+v, %v", spec, err)
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, filepath.Join(base, "data/kubelet/pods", testUID, "volumes/kubernetes.io~empty-dir/cache"))
	if fi, err := os.Lstat(filepath.Join(base, "kubelet")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("kubelet root symlink changed: %v", err)
	}
}

func TestInvalidNames(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	for _, c := range []struct{ uid, vol string }{
		{"../../etc", "cache"}, {"", "cache"}, {testUID, ".."}, {testUID, "../x"}, {testUID, "Cache"}, {"a/b", "v"},
	} {
		pod := &volume.Pod{UID: c.uid, Volumes: []volume.Spec{emptyDirSpec(c.vol, "")}}
		if _, err := e.plugin.NewMounter(&pod.Volumes[0], pod); !errors.Is(err, volume.ErrInvalidName) {
			t.Errorf("NewMounter(uid %q, vol %q) = %v; want ErrInvalidName", c.uid, c.vol, err)
		}
		if c.vol == "Cache" {
			continue // a valid directory name, only not a valid spec name
		}
		if _, err := e.plugin.NewUnmounter(c.vol, c.uid); !errors.Is(err, volume.ErrInvalidName) {
			t.Errorf("NewUnmounter(%q, %q) = %v; want ErrInvalidName", c.vol, c.uid, err)
		}
	}
	if entries, _ := os.ReadDir(e.root); len(entries) != 0 {
		t.Errorf("invalid names created %v", entries)
	}
	if _, err := e.plugin.NewMounter(&volume.Spec{Name: "x", Other: 1}, e.pod()); err == nil {
		t.Error("NewMounter accepted a non-emptyDir spec")
	}
	if e.plugin.CanSupport(&volume.Spec{Name: "x", Other: 1}) || !e.plugin.CanSupport(&volume.Spec{Name: "x", EmptyDir: &volume.EmptyDirSource{}}) {
		t.Error("CanSupport wrong")
	}
}

func TestConstructSpec(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}})
	m := e.setUp(t, pod, "cache")
	spec, err := e.plugin.ConstructSpec("cache", m.Path())
	if err != nil || spec.Name != "cache" || spec.EmptyDir.SizeLimit != 1<<20 {
		t.Errorf("ConstructSpec = %+v, %v", spec, err)
	}
	os.RemoveAll(e.metaDir(t, "cache")) // no metadata: from the disk
	if spec, err := e.plugin.ConstructSpec("cache", m.Path()); err != nil || spec.EmptyDir.Medium != "" {
		t.Errorf("ConstructSpec without metadata = %+v, %v", spec, err)
	}
	for _, p := range []string{"/elsewhere/pods/u/volumes/kubernetes.io~empty-dir/cache", m.Path() + "/..", filepath.Join(e.root, "pods", testUID, "volumes/example.com~x/cache")} {
		if _, err := e.plugin.ConstructSpec("cache", p); err == nil {
			t.Errorf("ConstructSpec(%q) accepted", p)
		}
	}
}

func TestPlanSetUpSizes(t *testing.T) {
	const Mi, Gi = int64(1 << 20), int64(1 << 30)
	for _, c := range []struct {
		name        string
		src         volume.EmptyDirSource
		pod         volume.Pod
		allocatable int64
		size, page  int64
		err         string
	}{
		{name: "memory: allocatable only", src: volume.EmptyDirSource{Medium: "Memory"}, allocatable: 8 * Gi, size: 8 * Gi},
		{name: "memory: pod limit smaller", src: volume.EmptyDirSource{Medium: "Memory"}, pod: volume.Pod{MemoryLimit: 512 * Mi}, allocatable: 8 * Gi, size: 512 * Mi},
		{name: "memory: sizeLimit smallest", src: volume.EmptyDirSource{Medium: "Memory", SizeLimit: 64 * Mi}, pod: volume.Pod{MemoryLimit: 512 * Mi}, allocatable: 8 * Gi, size: 64 * Mi},
		{name: "memory: nothing known", src: volume.EmptyDirSource{Medium: "Memory"}, size: 0},
		{name: "hugepages: one size", src: volume.EmptyDirSource{Medium: "HugePages"}, pod: volume.Pod{HugePages: map[int64]int64{2 * Mi: Gi}}, page: 2 * Mi},
		{name: "hugepages: none", src: volume.EmptyDirSource{Medium: "HugePages"}, err: "requests no huge pages"},
		{name: "hugepages: several", src: volume.EmptyDirSource{Medium: "HugePages"}, pod: volume.Pod{HugePages: map[int64]int64{2 * Mi: Gi, Gi: Gi}}, err: "several huge page sizes (1Gi, 2Mi)"},
		{name: "hugepages-1Gi", src: volume.EmptyDirSource{Medium: "HugePages-1Gi"}, pod: volume.Pod{HugePages: map[int64]int64{2 * Mi: Gi, Gi: Gi}}, page: Gi},
		{name: "hugepages-2Mi not requested", src: volume.EmptyDirSource{Medium: "HugePages-2Mi"}, pod: volume.Pod{HugePages: map[int64]int64{Gi: Gi}}, err: "no huge pages of size 2Mi"},
		{name: "hugepages-bad", src: volume.EmptyDirSource{Medium: "HugePages-x"}, err: "invalid page size"},
		{name: "unknown medium", src: volume.EmptyDirSource{Medium: "Disk"}, err: "unknown emptyDir medium"},
	} {
		p, err := planSetUp(&c.src, &c.pod, c.allocatable)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v; want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || p.size != c.size || p.pageSize != c.page {
			t.Errorf("%s: plan = %+v, %v; want size %d page %d", c.name, p, err, c.size, c.page)
		}
	}
}

// TestMemoryWithFakeMounter checks the options SetUp passes and the
// refusal to mount over a foreign mount, with mount-utils' FakeMounter
// (no root needed; the real tmpfs is tested below).
func TestMemoryWithFakeMounter(t *testing.T) {
	fake := mount.NewFakeMounter(nil)
	e := newEnv(t, t.TempDir(), fake)
	pod := e.pod(volume.Spec{Name: "mem", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 64 << 20}})
	pod.MemoryLimit = 1 << 30
	m := e.setUp(t, pod, "mem")
	if len(fake.MountPoints) != 1 {
		t.Fatalf("mounts = %+v", fake.MountPoints)
	}
	mp := fake.MountPoints[0]
	wantOpts := []string{"size=67108864"}
	if kernelSupportsNoswap() {
		wantOpts = append(wantOpts, "noswap")
	}
	if mp.Path != m.Path() || mp.Type != "tmpfs" || strings.Join(mp.Opts, ",") != strings.Join(wantOpts, ",") {
		t.Errorf("mount = %+v; want tmpfs on %s with %v", mp, m.Path(), wantOpts)
	}
	md, _ := readMetadata(e.metaDir(t, "mem"))
	if md == nil || md.Medium != volume.MediumMemory || md.SizeBytes != 64<<20 {
		t.Errorf("metadata = %+v", md)
	}
}

func TestReleaseAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{"6.18.44-fc-v445": true, "6.3.0": true, "6.2.16": false, "5.15.0-91-generic": false, "7.0": true, "6.3rc1": true, "x.y": false, "6": false} {
		if got := releaseAtLeast(rel, 6, 3); got != want {
			t.Errorf("releaseAtLeast(%q, 6, 3) = %v; want %v", rel, got, want)
		}
	}
}

type fakeQuotas struct {
	assigned  map[string]uint32
	assignErr error // returned by Assign after it recorded the path
	clearErr  error
	cleared   []string // paths Clear or Release was asked about
	// clearedDirs is, per Clear or Release, the identity of the directory
	// it was handed (zero for -1); clearedFor the project Clear was asked
	// to clear, zero for a Release.
	clearedDirs []fsquota.Project
	clearedFor  []fsquota.Project
	released    []bool // Release, not Clear
}

// fdIdentity is the device and inode of the open directory fd, as Assign
// reports them (zero for -1).
func fdIdentity(fd int) (fsquota.Project, error) {
	if fd < 0 {
		return fsquota.Project{}, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsquota.Project{}, err
	}
	return fsquota.Project{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

func (f *fakeQuotas) Assign(fd int, path string, limit int64) (fsquota.Project, error) {
	if f.assigned == nil {
		f.assigned = map[string]uint32{}
	}
	f.assigned[path] = 1048577
	p, err := fdIdentity(fd)
	if err != nil {
		return fsquota.Project{}, err
	}
	p.ID = 1048577
	return p, f.assignErr
}
func (f *fakeQuotas) Clear(fd int, path string, p fsquota.Project) error {
	return f.clear(fd, path, p, false)
}

func (f *fakeQuotas) Release(fd int, path string) error {
	return f.clear(fd, path, fsquota.Project{}, true)
}

func (f *fakeQuotas) clear(fd int, path string, p fsquota.Project, release bool) error {
	if f.clearErr != nil {
		return f.clearErr
	}
	dir, err := fdIdentity(fd)
	if err != nil {
		return err
	}
	f.cleared = append(f.cleared, path)
	f.clearedDirs = append(f.clearedDirs, dir)
	f.clearedFor = append(f.clearedFor, p)
	f.released = append(f.released, release)
	return nil
}
func (f *fakeQuotas) Usage(fd int, _ string) (fsquota.Usage, error) {
	// The directory carries the project Assign gave it, and nothing is
	// charged to it.
	if len(f.assigned) == 0 {
		return fsquota.Usage{}, fsquota.ErrNoProject
	}
	return fsquota.Usage{ProjectID: 1048577}, nil
}

func TestQuotaWiring(t *testing.T) {
	q := &fakeQuotas{clearErr: errors.New("quotactl: EIO")}
	root := t.TempDir()
	e := newEnv(t, root, nil, WithQuotas(q))
	m := e.setUp(t, e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}}), "cache")
	if q.assigned[m.Path()] != 1048577 {
		t.Fatalf("quota not assigned: %v", q.assigned)
	}
	// The record names the project and the directory it is on; Clear is
	// handed that directory, open, and that project.
	var st unix.Stat_t
	if err := unix.Stat(m.Path(), &st); err != nil {
		t.Fatal(err)
	}
	want := fsquota.Project{ID: 1048577, Dev: uint64(st.Dev), Ino: st.Ino}
	if md, err := readMetadata(e.metaDir(t, "cache")); err != nil || md.quotaProject() != want {
		t.Fatalf("recorded quota = %+v, %v; want %+v", md, err, want)
	}
	// A failing Clear is returned, and nothing is removed.
	err := e.tearDown("cache")
	if err == nil || !strings.Contains(err.Error(), "EIO") || volume.KindOf(err) != volume.Transient {
		t.Fatalf("TearDown = %v; want the quota error, transient", err)
	}
	if _, err := os.Stat(m.Path()); err != nil || !isReady(e.metaDir(t, "cache")) {
		t.Errorf("failed TearDown changed the volume: %v", err)
	}
	q.clearErr = nil
	if err := e.tearDown("cache"); err != nil || len(q.cleared) != 1 {
		t.Fatalf("TearDown = %v, cleared %v", err, q.cleared)
	}
	if q.released[0] || q.clearedFor[0] != want || q.clearedDirs[0] != (fsquota.Project{Dev: want.Dev, Ino: want.Ino}) {
		t.Errorf("Clear(directory %+v, project %+v); want the volume directory and %+v", q.clearedDirs[0], q.clearedFor[0], want)
	}
	// A recorded project without a quota manager is not silently leaked.
	e2 := newEnv(t, root, nil, WithQuotas(&fakeQuotas{}))
	e2.setUp(t, e2.pod(emptyDirSpec("other", "")), "other")
	e3 := newEnv(t, root, nil)
	if err := e3.tearDown("other"); err == nil || volume.KindOf(err) != volume.Final {
		t.Errorf("TearDown without quota manager = %v; want a final error", err)
	}
}

func TestUsageByWalk(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	m := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	mounttest.Build(t, m.Path(), "file a "+strings.Repeat("x", 8192), "file b/c y")
	u, err := e.plugin.Usage(testUID, "cache")
	if err != nil || u.Source != SourceWalk || u.Inodes != 4 || u.Bytes < 8192 {
		t.Errorf("Usage = %+v, %v; want a walk with 4 inodes and at least 8 KiB", u, err)
	}
	// The filesystem's numbers are the temporary directory's.
	var st unix.Statfs_t
	if err := unix.Statfs(m.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if u.FS.CapacityBytes != int64(st.Blocks)*int64(st.Bsize) || u.FS.Inodes != int64(st.Files) || u.FS.AvailableBytes <= 0 || u.FS.InodesFree <= 0 {
		t.Errorf("Usage.FS = %+v; want the capacity of the volume's filesystem (%d blocks of %d, %d inodes)", u.FS, st.Blocks, st.Bsize, st.Files)
	}
	if _, err := e.plugin.Usage("../x", "cache"); !errors.Is(err, volume.ErrInvalidName) {
		t.Errorf("Usage(bad uid) = %v", err)
	}
}

type usageQuotas struct{ fakeQuotas }

func (usageQuotas) Usage(int, string) (fsquota.Usage, error) {
	return fsquota.Usage{Bytes: 12345, Inodes: 6, ProjectID: 1048577}, nil
}

func TestUsageByQuota(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil, WithQuotas(&usageQuotas{}))
	e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	if u, err := e.plugin.Usage(testUID, "cache"); err != nil || u.Bytes != 12345 || u.Inodes != 6 || u.Source != SourceQuota || u.FS.CapacityBytes <= 0 {
		t.Errorf("Usage = %+v, %v; want the quota's 12345 bytes and 6 inodes, and the filesystem's capacity", u, err)
	}
}

// TestUsageByQuotaVolumeGone: a quota that still answers for a volume
// whose directory is gone is not a usage; the error says the volume is
// missing.
func TestUsageByQuotaVolumeGone(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil, WithQuotas(&usageQuotas{}))
	m := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	if err := os.RemoveAll(filepath.Dir(m.Path())); err != nil {
		t.Fatal(err)
	}
	if u, err := e.plugin.Usage(testUID, "cache"); !errors.Is(err, fs.ErrNotExist) || strings.Contains(fmt.Sprint(err), "%!") {
		t.Errorf("Usage of a volume whose directory is gone = %+v, %v; want an error matching fs.ErrNotExist", u, err)
	}
}

type unsupportedQuotas struct{ fakeQuotas }

func (unsupportedQuotas) Assign(int, string, int64) (fsquota.Project, error) {
	return fsquota.Project{}, fmt.Errorf("ext3: %w", errors.ErrUnsupported)
}

// TestQuotaUnsupportedIsNotAFailure: on a filesystem without project
// quotas SetUp succeeds, records no project, and usage comes from a walk.
func TestQuotaUnsupportedIsNotAFailure(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil, WithQuotas(&unsupportedQuotas{}))
	e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	md, err := readMetadata(e.metaDir(t, "cache"))
	if err != nil || md.QuotaProjectID != 0 {
		t.Fatalf("metadata = %+v, %v; want no project", md, err)
	}
	if u, err := e.plugin.Usage(testUID, "cache"); err != nil || u.Source != SourceWalk {
		t.Errorf("Usage = %+v, %v; want a walk", u, err)
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
}

// TestRealQuotaManagerOnXFS wires fsquota.Manager on a loop-mounted XFS
// without quota accounting (this kernel has none): SetUp records no
// project, TearDown succeeds; the project IDs themselves are tested in
// fsquota (and with real limits in its VM test).
func TestRealQuotaManagerOnXFS(t *testing.T) {
	root := mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f")
	files := t.TempDir()
	q := fsquota.New(fsquota.WithProjectsFile(filepath.Join(files, "projects")), fsquota.WithProjidFile(filepath.Join(files, "projid")))
	e := newEnv(t, filepath.Join(root, "kubelet"), nil, WithQuotas(q))
	e.setUp(t, e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}}), "cache")
	md, _ := readMetadata(e.metaDir(t, "cache"))
	if md == nil || md.QuotaProjectID != 0 {
		t.Errorf("metadata = %+v; want no project on a kernel without quotas", md)
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaClearedWhenDirectoryGone: the volume directory vanished (removed
// by hand, a crash) but the metadata still records a project: TearDown
// clears it (the bookkeeping) before dropping the metadata, the last
// record of the ID.
func TestQuotaClearedWhenDirectoryGone(t *testing.T) {
	q := &fakeQuotas{}
	e := newEnv(t, t.TempDir(), nil, WithQuotas(q))
	m := e.setUp(t, e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}}), "cache")
	if err := os.Remove(m.Path()); err != nil {
		t.Fatal(err)
	}
	q.clearErr = errors.New("quotactl: EIO")
	if err := e.tearDown("cache"); err == nil || !isReady(e.metaDir(t, "cache")) {
		t.Fatalf("TearDown = %v, ready %v; want the quota error and the metadata kept", err, isReady(e.metaDir(t, "cache")))
	}
	q.clearErr = nil
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
	if len(q.cleared) != 1 || q.cleared[0] != m.Path() {
		t.Errorf("cleared %v; want %s", q.cleared, m.Path())
	}
	// Released, with a directory on the volume's filesystem (the parent)
	// to clear limits on: no project ID is taken off anything.
	if len(q.clearedDirs) == 1 {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Dir(m.Path()), &st); err != nil {
			t.Fatal(err)
		}
		if got := q.clearedDirs[0]; !q.released[0] || got.Dev != uint64(st.Dev) || got.Ino != st.Ino {
			t.Errorf("the gone directory's project was cleared with %+v (released: %v); want Release with the parent, %d:%d", got, q.released[0], st.Dev, st.Ino)
		}
	}
	if _, err := os.Lstat(e.metaDir(t, "cache")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("metadata directory left: %v", err)
	}
}

// TestQuotaAssignedBeforeRecordIsCleared: SetUp records that it is
// assigning a project before it calls Assign, so a SetUp that stops after
// Assign touched the bookkeeping but before the ID was recorded — a crash
// (here a panic at the crash point), or Assign failing half-way — leaves
// a record from which TearDown clears the project, and without a quota
// manager TearDown refuses instead of leaking it.
func TestQuotaAssignedBeforeRecordIsCleared(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, e *env, q *fakeQuotas, m volume.Mounter)
	}{
		{"crash after Assign", func(t *testing.T, e *env, q *fakeQuotas, m volume.Mounter) {
			e.plugin.hook = func(p testhook.Point, _ string) {
				if p == testhook.SetUpQuotaAssigned {
					panic(p)
				}
			}
			func() {
				defer func() {
					if r := recover(); r != testhook.SetUpQuotaAssigned {
						t.Fatalf("SetUp ended with %v; want the crash point %s reached", r, testhook.SetUpQuotaAssigned)
					}
				}()
				_ = m.SetUp(e.ctx, volume.MounterArgs{})
			}()
			e.plugin.hook = nil
		}},
		{"Assign fails after recording", func(t *testing.T, e *env, q *fakeQuotas, m volume.Mounter) {
			q.assignErr = errors.New("write /etc/projid: EIO")
			if err := m.SetUp(e.ctx, volume.MounterArgs{}); err == nil || !strings.Contains(err.Error(), "EIO") {
				t.Fatalf("SetUp = %v; want the Assign error", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQuotas{}
			root := t.TempDir()
			e := newEnv(t, root, nil, WithQuotas(q))
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}})
			m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
			if err != nil {
				t.Fatal(err)
			}
			tc.stop(t, e, q, m)
			if q.assigned[m.Path()] == 0 {
				t.Fatalf("Assign was not called: %v", q.assigned)
			}
			if md, err := readMetadata(e.metaDir(t, "cache")); err != nil || md == nil || !md.QuotaPending || isReady(e.metaDir(t, "cache")) {
				t.Fatalf("after the stop: metadata %+v, %v, ready %v; want a pending quota recorded and no ready marker", md, err, isReady(e.metaDir(t, "cache")))
			}
			// Without a quota manager the project cannot be cleared: refused.
			if err := newEnv(t, root, nil).tearDown("cache"); err == nil || volume.KindOf(err) != volume.Final || !strings.Contains(err.Error(), "refusing to leak it") {
				t.Errorf("TearDown without a quota manager = %v; want a final refusal", err)
			}
			if err := e.tearDown("cache"); err != nil {
				t.Fatal(err)
			}
			if len(q.cleared) != 1 || q.cleared[0] != m.Path() {
				t.Errorf("cleared %v; want %s: a project assigned but not yet recorded is leaked", q.cleared, m.Path())
			}
			mustNotExist(t, m.Path())
			mustNotExist(t, e.metaDir(t, "cache"))
		})
	}
}

// TestMemorySetUpRefusesSymlinkedVolumePath: a symlink planted where the
// volume directory belongs is never mounted through.
func TestMemorySetUpRefusesSymlinkedVolumePath(t *testing.T) {
	fake := mount.NewFakeMounter(nil)
	e := newEnv(t, t.TempDir(), fake)
	pod := e.pod(emptyDirSpec("mem", "Memory"))
	dir, _ := e.layout.VolumeDir(testUID, PluginName, "mem")
	outside := t.TempDir()
	os.MkdirAll(filepath.Dir(dir), 0o750)
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	m, err := e.plugin.NewMounter(pod.Volume("mem"), pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(e.ctx, volume.MounterArgs{}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("SetUp through a symlink = %v; want a refusal", err)
	}
	if len(fake.MountPoints) != 0 {
		t.Errorf("mounted through the symlink: %+v", fake.MountPoints)
	}
}
