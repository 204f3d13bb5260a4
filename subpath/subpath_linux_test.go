package subpath

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

const uid = "uid-1"

type env struct {
	ctx     context.Context
	base    string
	layout  volume.Layout
	cleaner *Cleaner
	volDir  string
	subDir  string
	plugin  *emptydir.Plugin
}

func newEnv(t *testing.T) *env {
	_, ctx := ktesting.NewTestContext(t)
	base := t.TempDir()
	l, _ := volume.NewLayout(filepath.Join(base, "kubelet"))
	e := &env{ctx: ctx, base: base, layout: l, cleaner: New(l), plugin: emptydir.New(volume.NewHost(l, nil, 0))}
	pod := &volume.Pod{UID: uid, Volumes: []volume.Spec{{Name: "data", EmptyDir: &volume.EmptyDirSource{}}}}
	m, err := e.plugin.NewMounter(&pod.Volumes[0], pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	e.volDir = m.Path()
	e.subDir, _ = l.VolumeSubpathsDir(uid, "data")
	return e
}

func TestCleanMissingIsSuccess(t *testing.T) {
	e := newEnv(t)
	if err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Fatalf("Clean(missing) = %v", err)
	}
	if err := e.cleaner.Clean(e.ctx, "other-pod", emptydir.PluginName, "data"); err != nil {
		t.Fatalf("Clean(missing pod) = %v", err)
	}
	for _, c := range []struct{ uid, vol string }{{"../x", "data"}, {uid, ".."}, {uid, "a/b"}, {"", "data"}} {
		if err := e.cleaner.Clean(e.ctx, c.uid, emptydir.PluginName, c.vol); !errors.Is(err, volume.ErrInvalidName) {
			t.Errorf("Clean(%q, %q) = %v; want ErrInvalidName", c.uid, c.vol, err)
		}
	}
}

func TestCleanWithoutMounts(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.base, "outside")
	snap := mounttest.Sentinels(t, outside)
	mounttest.Build(t, e.subDir,
		"dir app/0",
		"file app/1 ",                  // a file entry, not mounted
		"symlink app/2 "+outside,       // a planted symlink: unlinked, not followed
		"symlink sidecar "+outside,     // at the container level too
		"file busy/0/leftover content", // a non-empty entry: refused up front
	)
	before := mounttest.Snapshot(t, e.subDir)
	err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), filepath.Join(e.subDir, "busy/0")) {
		t.Fatalf("Clean = %v; want ErrRefused naming busy/0", err)
	}
	mounttest.Intact(t, outside, snap)
	mounttest.Intact(t, e.subDir, before) // a refusal changes nothing
	os.Remove(filepath.Join(e.subDir, "busy/0/leftover"))
	if err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Fatalf("second Clean = %v", err)
	}
	if _, err := os.Lstat(e.subDir); !os.IsNotExist(err) {
		t.Errorf("subpath dir not removed: %v", err)
	}
}

func TestCleanSymlinkAtVolumeLevel(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.base, "outside")
	snap := mounttest.Sentinels(t, outside)
	os.MkdirAll(filepath.Dir(e.subDir), 0o750)
	os.Symlink(outside, e.subDir)
	if err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Fatal(err)
	}
	mounttest.Intact(t, outside, snap)
	if _, err := os.Lstat(e.subDir); !os.IsNotExist(err) {
		t.Errorf("planted symlink not removed: %v", err)
	}
}

// TestCleanRealBindMounts: subPath bind mounts of a directory and of a file
// from inside an emptyDir, as the kubelet makes them; a busy/foreign mount
// is reported and left; TearDown of the volume afterwards succeeds and
// nothing outside the pod directory changed.
func TestCleanRealBindMounts(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	outside := filepath.Join(e.base, "outside")
	snap := mounttest.Sentinels(t, outside)
	mounttest.Build(t, e.volDir, "file sub/dir/data.txt in-volume", "file conf/app.conf cfg")
	mounttest.Bind(t, filepath.Join(e.volDir, "sub/dir"), filepath.Join(e.subDir, "app/0"))
	mounttest.Bind(t, filepath.Join(e.volDir, "conf/app.conf"), filepath.Join(e.subDir, "app/1"))
	mounttest.Bind(t, filepath.Join(e.volDir, "sub/dir"), filepath.Join(e.subDir, "sidecar/0"))
	// Foreign: a tmpfs inside a subpath entry, and one on a container dir.
	foreignInner := filepath.Join(e.subDir, "sidecar/0/inner")
	mounttest.Tmpfs(t, foreignInner, "")
	foreignCtr := filepath.Join(e.subDir, "weird")
	mounttest.Tmpfs(t, foreignCtr, "")
	mounttest.Build(t, foreignCtr, "file keep x")

	entries, err := e.cleaner.List(uid, emptydir.PluginName, "data")
	if err != nil || len(entries) < 3 {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	mountedCount := 0
	for _, en := range entries {
		if en.MountPoint {
			mountedCount++
		}
	}
	if mountedCount != 3 {
		t.Errorf("List found %d mounted entries; want 3: %+v", mountedCount, entries)
	}

	before := mounttest.Snapshot(t, e.base)
	for _, op := range []struct {
		name string
		fn   func() error
	}{
		{"Check", func() error { return e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data") }},
		{"Clean", func() error { return e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data") }},
	} {
		err := op.fn()
		var crossing *mountdetect.CrossesMountError
		if !errors.Is(err, ErrRefused) || !errors.As(err, &crossing) {
			t.Fatalf("%s = %v; want ErrRefused with the foreign mounts", op.name, err)
		}
		for _, want := range []string{foreignInner, foreignCtr} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error does not name foreign mount %s: %v", op.name, want, err)
			}
		}
		if strings.Contains(err.Error(), "app/0") || strings.Contains(err.Error(), "app/1") {
			t.Errorf("%s: the volume's own binds are reported as foreign: %v", op.name, err)
		}
	}
	// A refusal changes nothing: every bind is still mounted.
	mounttest.Intact(t, e.base, before)
	for _, p := range []string{"app/0", "app/1", "sidecar/0"} {
		if m, _, _ := mountdetect.IsMountPoint(filepath.Join(e.subDir, p)); !m {
			t.Errorf("%s was unmounted by a refused Clean", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(foreignCtr, "keep")); string(b) != "x" {
		t.Error("foreign container mount touched")
	}

	// Once the foreign mounts go, cleaning finishes and TearDown succeeds.
	mounttest.Unmount(t, foreignInner)
	mounttest.Unmount(t, foreignCtr)
	if err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Fatalf("Clean after the foreign mounts are gone = %v", err)
	}
	u, _ := e.plugin.NewUnmounter("data", uid)
	if err := u.TearDown(e.ctx); err != nil {
		t.Fatalf("TearDown = %v", err)
	}
	mounttest.Intact(t, outside, snap)
}

func TestCleanBusyMount(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	mounttest.Build(t, e.volDir, "file sub/f x")
	target := filepath.Join(e.subDir, "app/0")
	mounttest.Bind(t, filepath.Join(e.volDir, "sub"), target)
	f, err := os.Open(filepath.Join(target, "f")) // an open file keeps the mount busy
	if err != nil {
		t.Fatal(err)
	}
	err = e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data")
	if !errors.Is(err, ErrLeft) || !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), target) {
		t.Fatalf("Clean = %v; want ErrLeft with EBUSY naming %s", err, target)
	}
	if m, _, _ := mountdetect.IsMountPoint(target); !m {
		t.Error("busy subpath mount was detached")
	}
	f.Close()
	if err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Fatalf("Clean once no longer busy = %v", err)
	}
}

// TestCleanMountOnContainerDirDuringWalk: a mount that appears on a
// <container> directory after Clean read the mount table is not entered:
// nothing on it is unlinked, and Clean reports it.
func TestCleanMountOnContainerDirDuringWalk(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	mounttest.Build(t, e.subDir, "dir app/0")
	ctrDir := filepath.Join(e.subDir, "app")
	nas := filepath.Join(e.base, "nas")
	mounttest.Build(t, nas, "file 0 precious", "dir 1")
	snap := mounttest.Snapshot(t, nas)
	testHookAfterMountTable = func() { mounttest.Bind(t, nas, ctrDir) }
	t.Cleanup(func() { testHookAfterMountTable = nil })
	err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), ctrDir) {
		t.Errorf("Clean = %v; want ErrRefused naming %s", err, ctrDir)
	}
	mounttest.Intact(t, nas, snap)
}

// TestOnlyOwnBindsAreUnmounted: a mount at an
// <index> entry is unmounted only when it is a bind of the volume
// directory or of something inside it. Anything else is refused by Check
// and Clean, which change nothing; the foreign mount keeps its data byte
// for byte.
func TestOnlyOwnBindsAreUnmounted(t *testing.T) {
	mounttest.RequireMounts(t)
	cases := []struct {
		name  string
		mount func(t *testing.T, e *env, target string) (data string)
	}{
		{"tmpfs", func(t *testing.T, e *env, target string) string {
			mounttest.Mount(t, "nas:/export", target, "tmpfs", 0, "size=1m")
			return target
		}},
		{"bind of a directory on another tmpfs", func(t *testing.T, e *env, target string) string {
			other := filepath.Join(e.base, "other")
			mounttest.Tmpfs(t, other, "size=1m")
			mounttest.Build(t, other, "dir share")
			mounttest.Bind(t, filepath.Join(other, "share"), target)
			return filepath.Join(other, "share")
		}},
		{"bind of a directory outside the volume on its filesystem", func(t *testing.T, e *env, target string) string {
			outside := filepath.Join(e.base, "kubelet", "outside")
			mounttest.Build(t, outside, "dir x")
			mounttest.Bind(t, outside, target)
			return outside
		}},
		{"bind of the volume's parent directory", func(t *testing.T, e *env, target string) string {
			mounttest.Bind(t, filepath.Dir(e.volDir), target)
			return filepath.Dir(e.volDir)
		}},
		{"own bind with a tmpfs stacked on it", func(t *testing.T, e *env, target string) string {
			mounttest.Build(t, e.volDir, "dir sub")
			mounttest.Bind(t, filepath.Join(e.volDir, "sub"), target)
			mounttest.Mount(t, "nas:/export", target, "tmpfs", 0, "size=1m")
			return target
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			mounttest.Build(t, e.volDir, "dir mine")
			own := filepath.Join(e.subDir, "app/0")
			mounttest.Bind(t, filepath.Join(e.volDir, "mine"), own)
			target := filepath.Join(e.subDir, "app/1")
			data := c.mount(t, e, target)
			mounttest.Build(t, target, "file sentinel precious")
			want := mounttest.Snapshot(t, data)
			before := mounttest.Snapshot(t, e.base)

			for name, fn := range map[string]func() error{
				"Check": func() error { return e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data") },
				"Clean": func() error { return e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data") },
			} {
				err := fn()
				if !errors.Is(err, ErrRefused) || !errors.Is(err, mountdetect.ErrCrossesMount) || !strings.Contains(err.Error(), target) {
					t.Errorf("%s = %v; want ErrRefused naming %s", name, err, target)
				}
			}
			mounttest.Intact(t, data, want)
			mounttest.Intact(t, e.base, before)
			for _, p := range []string{own, target} {
				if !mounttest.IsMountRoot(t, p) {
					t.Errorf("%s was unmounted", p)
				}
			}
			entries, err := e.cleaner.List(uid, emptydir.PluginName, "data")
			if err != nil || len(entries) != 2 || !entries[0].Own || entries[1].Own || !entries[1].MountPoint {
				t.Errorf("List = %+v, %v; want app/0 own, app/1 a foreign mount", entries, err)
			}
		})
	}
}

// TestOwnBindsOfAMemoryVolume: the volume is a tmpfs of its own; binds of
// it are unmounted, a bind of another tmpfs is not.
func TestOwnBindsOfAMemoryVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	_, ctx := ktesting.NewTestContext(t)
	base := t.TempDir()
	l, _ := volume.NewLayout(filepath.Join(base, "kubelet"))
	plugin := emptydir.New(volume.NewHost(l, nil, 1<<30))
	pod := &volume.Pod{UID: uid, Volumes: []volume.Spec{{Name: "data", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumMemory}}}}
	m, err := plugin.NewMounter(&pod.Volumes[0], pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(m.Path(), unix.MNT_DETACH) })
	subDir, _ := l.VolumeSubpathsDir(uid, "data")
	mounttest.Build(t, m.Path(), "dir a", "file b x")
	mounttest.Bind(t, m.Path(), filepath.Join(subDir, "c/0"))
	mounttest.Bind(t, filepath.Join(m.Path(), "a"), filepath.Join(subDir, "c/1"))
	mounttest.Bind(t, filepath.Join(m.Path(), "b"), filepath.Join(subDir, "c/2"))
	other := filepath.Join(base, "other")
	mounttest.Tmpfs(t, other, "size=1m")
	want := mounttest.Sentinels(t, other)
	mounttest.Bind(t, other, filepath.Join(subDir, "c/3"))
	cleaner := New(l)
	err = cleaner.Clean(ctx, uid, emptydir.PluginName, "data")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "c/3") || strings.Contains(err.Error(), "c/0") {
		t.Fatalf("Clean = %v; want a refusal naming c/3 only", err)
	}
	mounttest.Unmount(t, filepath.Join(subDir, "c/3"))
	if err := cleaner.Clean(ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Fatalf("Clean of the own binds = %v", err)
	}
	mustNotExist(t, subDir)
	mounttest.Intact(t, other, want)
	if b, err := os.ReadFile(filepath.Join(m.Path(), "b")); err != nil || string(b) != "x" {
		t.Errorf("volume data: %q, %v", b, err)
	}
}

// TestSymlinksAboveTheVolumeAreErrors: a symlinked
// pods/<uid> or volume-subpaths directory is an error naming it, and
// nothing behind it is touched.
func TestSymlinksAboveTheVolumeAreErrors(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, comp := range []string{"pods/" + uid, "pods/" + uid + "/volume-subpaths"} {
		t.Run(comp, func(t *testing.T) {
			e := newEnv(t)
			elsewhere := filepath.Join(e.base, "elsewhere")
			victim := filepath.Join(elsewhere, "volume-subpaths/data/app/0")
			mounttest.Build(t, elsewhere, "dir volume-subpaths/data/app/0", "dir share")
			mounttest.Bind(t, filepath.Join(elsewhere, "share"), victim)
			mounttest.Build(t, victim, "file precious keep")
			before := mounttest.Snapshot(t, elsewhere)
			link := filepath.Join(e.layout.Root(), comp)
			target := elsewhere
			if comp == "pods/"+uid {
				// The pod directory itself: the pod's volumes move along.
				if err := os.Rename(link, filepath.Join(elsewhere, "pod")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(elsewhere, "volume-subpaths"), filepath.Join(elsewhere, "pod/volume-subpaths")); err != nil {
					t.Fatal(err)
				}
				target = filepath.Join(elsewhere, "pod")
				victim = filepath.Join(target, "volume-subpaths/data/app/0")
				t.Cleanup(func() { _ = unix.Unmount(victim, unix.MNT_DETACH) }) // moved with its directory
				before = mounttest.Snapshot(t, elsewhere)
			} else {
				target = filepath.Join(elsewhere, "volume-subpaths")
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			for name, fn := range map[string]func() error{
				"Check": func() error { return e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data") },
				"Clean": func() error { return e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data") },
				"List":  func() error { _, err := e.cleaner.List(uid, emptydir.PluginName, "data"); return err },
			} {
				if err := fn(); !errors.Is(err, unix.ELOOP) || !strings.Contains(err.Error(), link) {
					t.Errorf("%s = %v; want an error naming the symlink %s", name, err, link)
				}
			}
			mounttest.Intact(t, elsewhere, before)
			if !mounttest.IsMountRoot(t, victim) {
				t.Error("the bind behind the symlink was unmounted")
			}
		})
	}
}

func mustNotExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)", p, err)
	}
}

// TestCleanRechecksBeforeUnmount: a foreign tmpfs swapped in for an own
// bind between the examination and the unmount is not unmounted: Clean
// compares each entry's mount ID with the one examined.
func TestCleanRechecksBeforeUnmount(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	mounttest.Build(t, e.volDir, "dir sub")
	target := filepath.Join(e.subDir, "app/0")
	mounttest.Bind(t, filepath.Join(e.volDir, "sub"), target)
	var snap map[string]string
	testHookBeforeAct = func() {
		mounttest.Unmount(t, target)
		mounttest.Tmpfs(t, target, "size=1m")
		snap = mounttest.Sentinels(t, target)
	}
	t.Cleanup(func() { testHookBeforeAct = nil })
	err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data")
	if !errors.Is(err, ErrLeft) || !errors.Is(err, mountdetect.ErrCrossesMount) || !strings.Contains(err.Error(), target) {
		t.Fatalf("Clean = %v; want ErrLeft with a crossing naming %s", err, target)
	}
	if !mounttest.IsMountRoot(t, target) {
		t.Fatal("the tmpfs swapped in was unmounted")
	}
	mounttest.Intact(t, target, snap)
}

// TestNonEmptyIndexRefusedUpFront: an <index> directory that is not a
// mount point but holds files would make rmdir fail after the other
// entries were unmounted; the examination refuses it first.
func TestNonEmptyIndexRefusedUpFront(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	mounttest.Build(t, e.volDir, "dir sub")
	own := filepath.Join(e.subDir, "app/0")
	mounttest.Bind(t, filepath.Join(e.volDir, "sub"), own)
	mounttest.Build(t, e.subDir, "file app/1/planted x")
	err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data")
	if !errors.Is(err, ErrRefused) || !errors.Is(err, unix.ENOTEMPTY) || !strings.Contains(err.Error(), "app/1") {
		t.Fatalf("Clean = %v; want a refusal naming app/1", err)
	}
	if !mounttest.IsMountRoot(t, own) {
		t.Error("an own bind was unmounted by a refused Clean")
	}
}

// TestShareMountedOnVolumeSubpathsIsNeverWalked: a share (a tmpfs standing
// for a NAS) mounted on <pod>/volume-subpaths is refused by Check, and
// Clean neither unlinks its files nor removes its directories:
// volume-subpaths must be on the pod directory's mount, like emptydir's
// volumes and plugins directories.
func TestShareMountedOnVolumeSubpathsIsNeverWalked(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	nas := filepath.Dir(e.subDir) // <pod>/volume-subpaths
	mounttest.Tmpfs(t, nas, "size=1m")
	mounttest.Build(t, nas,
		"file data/report.txt precious data on the share",
		"file data/app/0 precious file where an index would be",
		"dir data/app/1",
	)
	want := mounttest.Snapshot(t, nas)

	if err := e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data"); err == nil {
		t.Errorf("Check = nil; want a refusal: %s is on another mount than the pod directory", e.subDir)
	}
	err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data")
	t.Logf("Clean = %v", err)
	mounttest.Intact(t, nas, want)
	if t.Failed() {
		t.Errorf("Clean deleted files on the share mounted at %s", nas)
	}
}

// TestSymlinkedVolumeDoesNotBlockTheCleanup: the volume directory replaced
// by a symlink, which emptydir's teardown unlinks. No mount is a bind of
// it, so the subpath check passes and the cleanup goes ahead (a check that
// failed on it for ever would keep the volume manager from ever tearing
// the volume down).
func TestSymlinkedVolumeDoesNotBlockTheCleanup(t *testing.T) {
	e := newEnv(t)
	mounttest.Build(t, e.subDir, "dir app/0")
	if err := os.RemoveAll(e.volDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", e.volDir); err != nil {
		t.Fatal(err)
	}
	plan, err := e.plugin.PlanTearDown(uid, "data", nil)
	if err != nil || plan.Action != emptydir.ActionRemove {
		t.Fatalf("PlanTearDown = %v, %v; want remove (the link is unlinked)", plan.Action, err)
	}
	if err := e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Errorf("Check = %v; want nil: no mount can be a bind of a symlink that is never followed, and the teardown would unlink it", err)
	}
	if err := e.cleaner.Clean(e.ctx, uid, emptydir.PluginName, "data"); err != nil {
		t.Errorf("Clean = %v; want nil", err)
	}
}

// TestCheckMemoryIsBounded: the names an attacker writes
// into volume-subpaths/<volume>/<container> cost Check and Clean time, not
// memory: the directories are read in a fixed buffer and entries that are
// not mount points are not kept. The live heap is sampled while Check runs
// over 100 and over 20,000 entries with 200-byte names (4 MB of names).
func TestCheckMemoryIsBounded(t *testing.T) {
	peak := func(n int) uint64 {
		e := newEnv(t)
		ctr := filepath.Join(e.subDir, "app")
		if err := os.MkdirAll(ctr, 0o750); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			f, err := os.Create(filepath.Join(ctr, fmt.Sprintf("%0200d", i)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		old := debug.SetGCPercent(1)
		defer debug.SetGCPercent(old)
		// Garbage not yet collected only ever adds to a sample: the least
		// of three runs is the one closest to what Check really holds (a
		// Check that kept the names would hold them in every run).
		least := uint64(math.MaxUint64)
		for range 3 {
			least = min(least, checkPeak(t, e))
		}
		return least
	}
	small, large := peak(100), peak(20000)
	t.Logf("live heap peak above the start: %d bytes for 100 entries, %d for 20,000", small, large)
	// The names alone are 4 MB: a Check that kept them would exceed 3 MiB
	// in every run; garbage in flight (more of it under -race) stays below.
	if large > small+(3<<20) {
		t.Errorf("Check over 20,000 attacker-made entries held %d bytes more at its peak (%d for 100): memory grows with the entries", large, small)
	}
}

// checkPeak runs Check over e's subpaths and returns the live heap's peak
// above its level before.
func checkPeak(t *testing.T, e *env) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var max atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			select {
			case <-stop:
				return
			default:
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > max.Load() {
				max.Store(v)
			}
			runtime.Gosched()
		}
	}()
	err := e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data")
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if max.Load() < base {
		return 0
	}
	return max.Load() - base
}
