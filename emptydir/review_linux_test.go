package emptydir

// Findings of the adversarial review of issue 10's teardown. Each test
// failed on the code before its fix (commit messages say which).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/mounttest"
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
func identityOf(t *testing.T, vol string) *MountRecord {
	t.Helper()
	fd, err := unix.Open(vol, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	mi, err := identify(fd, "")
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	return &MountRecord{UniqueID: mi.uniqueID, ID: mi.id, Dev: mi.dev}
}

// writeForged writes a nodevol.json claiming a Memory-medium volume whose
// mount is rec.
func writeForged(t *testing.T, metaDir string, rec *MountRecord) {
	t.Helper()
	b, err := json.Marshal(struct {
		Medium string       `json:"medium"`
		Mount  *MountRecord `json:"mount"`
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

// TestForgedRecordUnmountsForeignMount: "a mount on the volume
// directory is unmounted only when it matches SetUp's record" — but the
// record is nodevol.json in the pod directory, which the attacker writes.
// A share (a tmpfs standing for a NAS) mounted on a Default volume's
// directory, plus a nodevol.json claiming a Memory medium with the share's
// identity (with or without the unique ID: a record without one is
// accepted on a kernel that has them, falling back to the reusable classic
// ID), and PlanTearDown says "unmount-and-remove" and TearDown unmounts the
// share: a mount SetUp never made, which no check proves is the volume's.
// (Nothing of the share is deleted: the removal after the unmount works on
// the directory underneath. A mount point renamed into the volume's place
// from another namespace — any of the pod's other volumes — is taken the
// same way, and DirIno/DirDev, also forged or left 0, do not stop it.)
//
// Fixed: SetUp names each filesystem it creates with a random source
// (newSource) and the record proves a mount only through that source, read
// from the mount table, and the unique mount ID where the kernel has one.
func TestForgedRecordUnmountsForeignMount(t *testing.T) {
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

// TestForgedRecordSetUpChmodsForeignMount: the same forged record
// makes SetUp (after the attacker deletes the ready marker, or on a
// restart's verification) adopt the share on the volume directory as "the
// recorded mount already there" and fchmod its root to 0777 (and fchown
// it to the FSGroup, setgid): a change to another mount's data. The
// package promises that a mount found on the directory that SetUp has no
// record of is never adopted; the record proves nothing.
//
// Fixed: SetUp adopts a mount only when recordedMountOn proves it (source
// and mount ID), as TearDown does.
func TestForgedRecordSetUpChmodsForeignMount(t *testing.T) {
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

// TestUsageWalkQuadraticMemory: Usage of a Default volume without a
// quota walks the tree with mountdetect.DiskUsage, whose stack keeps, per
// level, a frame holding the full path of that level as a string. A chain
// of D directories with long names (which the pod writes into its own
// volume; mkdirat relative to the previous one, so PATH_MAX does not
// limit it) holds sum(i*len) = D²·len/2 bytes at the bottom: 1,200 levels
// of 250-byte names hold ~180 MB at once, 15,000 levels (within the fd
// limit a kubelet runs with) ~28 GB — the kubelet's periodic usage
// measurement runs out of memory.
//
// Fixed: each frame of the walk holds its own name and its parent, not its
// path.
func TestUsageWalkQuadraticMemory(t *testing.T) {
	base := mounttest.MemTempDir(t)
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	vol := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache").Path()
	const depth = 1200
	name := strings.Repeat("d", 250)
	fd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	t.Cleanup(func() { _ = e.tearDown("cache") })

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	u, err := e.plugin.Usage(testUID, "cache")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("Usage = %+v; allocated %d bytes for a chain of %d directories (%d bytes of names)", u, got, depth, depth*len(name))
	if got > 32<<20 {
		t.Errorf("Usage allocated %d MiB walking %d KiB of attacker-written names: memory grows with the square of the depth", got>>20, depth*len(name)>>10)
	}
}

// TestStalledFUSEOnVolumeHangs: a privileged container with
// bidirectional propagation (the only kind that can mount into the host's
// volume directory) mounts a FUSE filesystem on its emptyDir and stops
// answering. Every entry point begins with fstatat(vols, name) of the
// volume, which crosses into the mount and asks the FUSE daemon for the
// root's attributes: PlanTearDown (scan, teardown --dry-run),
// CheckTearDown, TearDown and Usage block until the daemon dies, instead
// of refusing the foreign mount. (statx with only STATX_MNT_ID, or
// AT_STATX_DONT_SYNC, would not ask the daemon.)
//
// Fixed: the volume directory is looked at with statx AT_STATX_DONT_SYNC
// asking only for its type and mount IDs, a mount root is opened O_PATH,
// and nothing is asked of a mounted filesystem (fstatfs, open) before it
// is proven the volume's own.
func TestStalledFUSEOnVolumeHangs(t *testing.T) {
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
