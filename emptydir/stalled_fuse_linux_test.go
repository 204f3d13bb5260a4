package emptydir

// A filesystem that stops answering (here a FUSE filesystem whose daemon
// never answers), mounted by whoever can mount in the pod directory, hangs
// no entry point: nothing is asked of a mount before it is proven the
// volume's own. Every call returns within 5 s.

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// stalledFUSE mounts a directory FUSE filesystem that never answers.
func stalledFUSE(t *testing.T, source, target string) {
	mounttest.StalledFUSE(t, source, target, "040000")
}

func within5s(t *testing.T, what string, fn func() error) {
	t.Helper()
	t.Logf("%s = %v", what, mounttest.Within(t, 5*time.Second, what, fn))
}

// TestForgedFUSERecordIsNotAsked: FUSE takes any source string, so an
// attacker mounts a FUSE filesystem with a source of nodevol's form
// ("nodevol-emptydir-<digest>") on the volume directory and writes a
// nodevol.json naming that source, type "fuse" and the mount's IDs. The
// mount is not proven the volume's own (a record proves only a tmpfs or a
// hugetlbfs), so PlanTearDown, Usage and TearDown ask its daemon nothing —
// no fstatfs, no open of its root — and return.
func TestForgedFUSERecordIsNotAsked(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	vol := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache").Path()
	stalledFUSE(t, forgedSource, vol)
	forgeRecordOf(t, e.metaDir(t, "cache"), vol, "fuse", forgedSource)

	within5s(t, "PlanTearDown", func() error { _, err := e.plugin.PlanTearDown(testUID, "cache", nil); return err })
	within5s(t, "Usage", func() error { _, err := e.plugin.Usage(testUID, "cache"); return err })
	within5s(t, "TearDown", func() error { return e.tearDown("cache") })
}

// TestStalledFUSEAboveVolumeIsNotAsked: a stalled FUSE filesystem mounted
// on the pod directory, its volumes directory,
// volumes/kubernetes.io~empty-dir or plugins/kubernetes.io~empty-dir/<vol>
// is refused before anything asks it (not even FUSE_OPENDIR, which an
// O_RDONLY openat of its root would send): PlanTearDown returns.
func TestStalledFUSEAboveVolumeIsNotAsked(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, where := range []string{"volumes/kubernetes.io~empty-dir", "plugins/kubernetes.io~empty-dir/cache", "volumes", ""} {
		name := where
		if name == "" {
			name = "the pod directory"
		}
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			e := newEnv(t, filepath.Join(base, "kubelet"), nil)
			e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
			target := filepath.Join(e.root, "pods", testUID, where)
			stalledFUSE(t, "stalled", target)
			within5s(t, "PlanTearDown", func() error { _, err := e.plugin.PlanTearDown(testUID, "cache", nil); return err })
		})
	}
}

// TestScanVolumesStalledFUSEIsNotAsked: volume.Layout.ScanVolumes (nodevol
// scan) returns with a stalled FUSE filesystem on a pod's
// volumes/kubernetes.io~empty-dir: it does not open or list a directory
// before checking for a mount, so one pod cannot hang the scan of every
// pod on the node.
func TestScanVolumesStalledFUSEIsNotAsked(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	stalledFUSE(t, "stalled", filepath.Join(e.root, "pods", testUID, "volumes/kubernetes.io~empty-dir"))
	within5s(t, "ScanVolumes", func() error { _, err := e.layout.ScanVolumes(); return err })
}

// TestStalledFUSEOnVolumeIsNotAsked: a privileged container with
// bidirectional propagation (the only kind that can mount into the host's
// volume directory) mounts a FUSE filesystem on its emptyDir, or inside
// it, and stops answering. PlanTearDown (scan, teardown --dry-run),
// TearDown and Usage return instead of blocking until the daemon dies:
// the volume directory is looked at with statx AT_STATX_DONT_SYNC asking
// only for its type and mount IDs, a mount root is opened O_PATH, and
// nothing is asked of a mounted filesystem (fstatfs, open) before it is
// proven the volume's own.
func TestStalledFUSEOnVolumeIsNotAsked(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, where := range []string{"on the volume directory", "inside the volume"} {
		t.Run(where, func(t *testing.T) { testStalledFUSE(t, where == "inside the volume") })
	}
}

func testStalledFUSE(t *testing.T, inside bool) {
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	vol := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache").Path()
	target := vol
	if inside {
		target = filepath.Join(vol, "inner")
	}
	mounttest.StalledFUSE(t, "stalled", target, "040000")
	for _, c := range []struct {
		what string
		fn   func() error
	}{
		{"PlanTearDown", func() error { _, err := e.plugin.PlanTearDown(testUID, "cache", nil); return err }},
		{"TearDown", func() error { return e.tearDown("cache") }},
		{"Usage", func() error { _, err := e.plugin.Usage(testUID, "cache"); return err }},
	} {
		done := make(chan error, 1)
		go func() { done <- c.fn() }()
		select {
		case err := <-done:
			t.Logf("%s = %v", c.what, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s has not returned after 5s: it blocks on the stalled FUSE mount on the volume directory", c.what)
		}
	}
}

// TestForgedRecordOfAFUSEMountProvesNothing: a FUSE filesystem may name
// any source, nodevol's random form included; a record naming one (with
// the mount's type and IDs) proves nothing, since SetUp only ever makes
// tmpfs and hugetlbfs. Its stalled daemon is asked nothing: teardown
// refuses and SetUp fails at once.
func TestForgedRecordOfAFUSEMountProvesNothing(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	pod, vol := e.memoryVolume(t)
	if err := unix.Unmount(vol, 0); err != nil {
		t.Fatal(err)
	}
	source := sourceFor("0123456789abcdef", testUID, "cache")
	mounttest.StalledFUSE(t, source, vol, "040000")
	rec := identityOf(t, vol)
	rec.FSType, rec.Source = "fuse", source
	meta := e.metaDir(t, "cache")
	writeForged(t, meta, rec)
	if err := os.Remove(filepath.Join(meta, readyFileName)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		fn   func() error
	}{
		{"TearDown", func() error { return e.tearDown("cache") }},
		{"SetUp", func() error {
			m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
			if err != nil {
				return err
			}
			return m.SetUp(e.ctx, volume.MounterArgs{})
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- c.fn() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s succeeded on a forged record of a FUSE mount", c.what)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s blocks on the FUSE mount a forged record names", c.what)
		}
	}
	if !mounttest.IsMountRoot(t, vol) {
		t.Error("the FUSE mount was unmounted")
	}
}
