package emptydir

// A volume's record (nodevol.json) is in the pod directory, which the
// attacker writes: a forged record must prove no mount that SetUp did not
// make, for TearDown and for SetUp.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// forgeRecord writes, as the attacker can (the metadata directory is in
// the pod directory), a nodevol.json claiming that SetUp mounted a
// Memory-medium tmpfs whose identity is that of the mount now on vol.
func forgeRecord(t *testing.T, metaDir, vol, source string, unique bool) {
	t.Helper()
	rec := identityOf(t, vol)
	rec.FSType, rec.Source = "tmpfs", source
	if !unique {
		rec.UniqueID = 0
	}
	writeForged(t, metaDir, rec)
}

// identityOf reads the identity of the mount on vol, as the attacker can
// (statx on an O_PATH descriptor, mount IDs only: a stalled FUSE mount is
// not asked).
func identityOf(t *testing.T, vol string) *mountRecord {
	t.Helper()
	fd, err := unix.Open(vol, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	mi, err := fsat.StatMount(fd, "", bothIDs)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	return &mountRecord{UniqueID: mi.UniqueID, ID: mi.ID, Dev: mi.Dev}
}

// writeForged writes a nodevol.json claiming a Memory-medium volume whose
// mount is rec.
func writeForged(t *testing.T, metaDir string, rec *mountRecord) {
	t.Helper()
	b, err := json.Marshal(struct {
		Medium string       `json:"medium"`
		Mount  *mountRecord `json:"mount"`
	}{"Memory", rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(metaDir, metaFileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// memoryVolume sets up the Memory-medium volume "cache" and returns its
// directory; the clean-up detaches whatever is left mounted on it.
func (e *env) memoryVolume(t *testing.T) (*volume.Pod, string) {
	t.Helper()
	pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
	pod.MemoryLimit = 64 << 20
	vol := e.setUp(t, pod, "cache").Path()
	t.Cleanup(func() {
		for mounttest.IsMountRoot(t, vol) {
			_ = detach(vol)
		}
	})
	return pod, vol
}

// TestForgedRecordDoesNotUnmountForeignMount: a share (a tmpfs standing
// for a NAS) is mounted on a Default volume's directory, and the volume's
// nodevol.json — in the pod directory, which the attacker writes — claims a
// Memory medium with the share's identity, with or without the unique
// mount ID (a record without one must not fall back to the reusable
// classic ID on a kernel that has unique IDs). PlanTearDown and TearDown
// must leave the share mounted, its data byte for byte: no check proves it
// the volume's. (A mount point renamed into the volume's place from
// another namespace — any of the pod's other volumes — is the same case,
// and a forged or zero DirIno/DirDev changes nothing.) A mount is proven
// the volume's only by the random source SetUp gives each filesystem it
// makes (newSource), read from the mount table, and by the unique mount ID
// where the kernel has one.
func TestForgedRecordDoesNotUnmountForeignMount(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, unique := range []bool{true, false} {
		t.Run(fmt.Sprintf("uniqueID=%v", unique), func(t *testing.T) {
			base := t.TempDir()
			e := newEnv(t, filepath.Join(base, "kubelet"), nil)
			vol := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache").Path()
			mounttest.Mount(t, "nas:/export", vol, "tmpfs", 0, "size=1m")
			want := mounttest.Sentinels(t, vol)
			forgeRecord(t, e.metaDir(t, "cache"), vol, "nas:/export", unique)

			plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
			t.Logf("PlanTearDown = %v (%s), %v", plan.Action, plan.Reason, err)
			err = e.tearDown("cache")
			t.Logf("TearDown = %v", err)
			if !mounttest.IsMountRoot(t, vol) {
				t.Errorf("the share mounted on %s was unmounted on the strength of a nodevol.json the attacker wrote", vol)
				return
			}
			mounttest.Intact(t, vol, want)
		})
	}
}

// TestForgedRecordDoesNotMakeSetUpAdopt: the same forged record, with the
// ready marker deleted (as the attacker can; a restart's verification is
// the same case): SetUp must not adopt the share on the volume directory
// as "the recorded mount already there", so its root keeps its mode and
// group (no fchmod to 0777, no fchown to the FSGroup with setgid). A mount
// found on the directory is adopted only when recordedMountOn proves it
// (source and mount ID), as TearDown does.
func TestForgedRecordDoesNotMakeSetUpAdopt(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	pod, vol := e.memoryVolume(t)
	// The volume's own tmpfs is gone (or renamed away from another
	// namespace); a share with a private root takes its place.
	if err := unix.Unmount(vol, 0); err != nil {
		t.Fatal(err)
	}
	mounttest.Mount(t, "nas:/export", vol, "tmpfs", 0, "size=1m,mode=0700")
	forgeRecord(t, e.metaDir(t, "cache"), vol, "nas:/export", true)
	if err := os.Remove(filepath.Join(e.metaDir(t, "cache"), readyFileName)); err != nil {
		t.Fatal(err)
	}
	gid := int64(4242)
	m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
	if err != nil {
		t.Fatal(err)
	}
	err = m.SetUp(e.ctx, volume.MounterArgs{FSGroup: &gid})
	t.Logf("SetUp = %v", err)
	var st unix.Stat_t
	if err := unix.Stat(vol, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o700 || st.Gid != 0 {
		t.Errorf("SetUp changed the share's root to mode %#o gid %d (was 0700 gid 0): it adopted a mount it did not make on a forged record", st.Mode&0o7777, st.Gid)
	}
}

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

// TestForgedRecordOfOtherFSTypeProvesNothing: a ramfs (standing for any
// filesystem whose source its mounter chooses) with a nodevol-style source
// and a record naming "ramfs" is not planned for unmounting as the
// volume's own: a record can only match a tmpfs or a hugetlbfs, the only
// types SetUp makes.
func TestForgedRecordOfOtherFSTypeProvesNothing(t *testing.T) {
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
