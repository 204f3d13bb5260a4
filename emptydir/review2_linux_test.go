package emptydir

// Findings of the second adversarial review of issue 10 (attacking the
// fixes of 480ff39 and 8d3db63). Each test failed on the code before its fix.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/mounttest"
)

// forgedSource has the form newSource gives the volume "cache" of the
// test pod: the attacker picks it (the digest in it is no secret).
var forgedSource = sourceFor("0123456789abcdef", testUID, "cache")

// forgeRecordOf writes a nodevol.json claiming a Memory-medium mount of
// fsType from source, with the identity of the mount now on vol.
func forgeRecordOf(t *testing.T, metaDir, vol, fsType, source string) {
	t.Helper()
	rec := identityOf(t, vol)
	rec.FSType, rec.Source = fsType, source
	writeForged(t, metaDir, rec)
}

// stalledFUSE mounts a directory FUSE filesystem that never answers.
func stalledFUSE(t *testing.T, source, target string) {
	mounttest.StalledFUSE(t, source, target, "040000")
}

func within5s(t *testing.T, what string, fn func() error) {
	t.Helper()
	t.Logf("%s = %v", what, mounttest.Within(t, 5*time.Second, what, fn))
}

// TestForgedFUSERecordHangs: provenBy accepts any file system type
// the record names, not only tmpfs and hugetlbfs. FUSE takes any source
// string, so an attacker mounts a FUSE filesystem with source
// "nodevol-emptydir-<16 hex>" on the volume directory and writes a
// nodevol.json naming that source, type "fuse" and the mount's IDs. The
// mount is then "proven the volume's own", and what the no-hang fix
// promised never happens before proof happens after it: PlanTearDown and
// TearDown call DetectFile (fstatfs) on it, Usage fstatfs, and SetUp's
// adoption opens its root O_RDONLY and fchmods it (setMode) — each a
// request to the daemon, which never answers. (Beyond hanging: any
// filesystem whose source the mounter chooses — ext4 or xfs through a
// device node or symlink named like a nodevol source in the mounter's
// cwd, overlayfs, ramfs, 9p — is "proven" too, and SetUp chmods/chowns
// its root.)
func TestForgedFUSERecordHangs(t *testing.T) {
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

// TestForgedRecordOfOtherFSTypeProven: the same without a hang:
// a ramfs (standing for any filesystem whose source the mounter chooses)
// with a nodevol-style source and a record naming "ramfs" is proven the
// volume's own and unmounted; the package says a forged record can only
// match a tmpfs or hugetlbfs.
func TestForgedRecordOfOtherFSTypeProven(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	vol := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache").Path()
	mounttest.Mount(t, forgedSource, vol, "ramfs", 0, "")
	forgeRecordOf(t, e.metaDir(t, "cache"), vol, "ramfs", forgedSource)
	plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
	t.Logf("PlanTearDown = %v (%s), %v", plan.Action, plan.Reason, err)
	if plan.Action == ActionUnmountAndRemove {
		t.Errorf("a ramfs mounted by someone else is planned for unmounting as the volume's own tmpfs: the record's fsType is not restricted to tmpfs/hugetlbfs")
	}
}

// TestStalledFUSEAboveVolumeHangs: openVolume opens pods/<uid>,
// volumes/kubernetes.io~empty-dir and plugins/kubernetes.io~empty-dir/<vol>
// with an O_RDONLY openat (fsat.walk/openChild) and only then checks
// SameMount: a FUSE filesystem mounted on any of them is asked to open its
// root (FUSE_OPENDIR) before it is refused, and a stalled daemon hangs
// PlanTearDown, TearDown and Usage just as before the no-hang fix.
func TestStalledFUSEAboveVolumeHangs(t *testing.T) {
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

// TestManyTempsFailAfterRemoval: checkMetadataDir accepts any
// number of ".nodevol.json.tmp-<16 hex>" files (the attacker writes the
// metadata directory), but removeMetadata removes at most 100 of them, so
// the final rmdir fails with ENOTEMPTY after the volume directory, the
// ready marker and nodevol.json are gone: the teardown changes everything
// and then fails — what 8d3db63 set out to prevent (a retry removes the
// next 100; 10,000 files cost 100 failed teardowns with backoff).
func TestManyTempsFailAfterRemoval(t *testing.T) {
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	md := e.metaDir(t, "cache")
	for i := range 150 {
		if err := os.WriteFile(filepath.Join(md, fmt.Sprintf(".nodevol.json.tmp-%016x", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
	t.Logf("PlanTearDown = %v (%s) metaErr=%v, %v", plan.Action, plan.Reason, plan.MetaErr, err)
	if err := e.tearDown("cache"); err != nil {
		t.Errorf("TearDown = %v; the plan said %v, and the teardown failed after removing the volume", err, plan.Action)
	}
}

// TestScanStalledFUSEHangs: volume.Layout.ScanVolumes (nodevol
// scan) opens pods/<uid>/volumes and each plugin directory O_RDONLY and
// reads them with getdents, never checking for a mount first: a stalled
// FUSE filesystem on any pod's volumes/kubernetes.io~empty-dir hangs the
// scan of every pod on the node.
func TestScanStalledFUSEHangs(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	stalledFUSE(t, "stalled", filepath.Join(e.root, "pods", testUID, "volumes/kubernetes.io~empty-dir"))
	within5s(t, "ScanVolumes", func() error { _, err := e.layout.ScanVolumes(); return err })
}
