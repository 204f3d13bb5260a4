package emptydir

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestPlanListedHostileMetadata: whoever writes in a pod directory puts,
// where an emptyDir's record and metadata directory belong, a FIFO, a
// device node, a sparse record of a terabyte, a file mounted on the
// record, a tmpfs holding a forged record mounted on the metadata
// directory, a symlink and a file. PlanListed plans each volume exactly as
// PlanTearDown does (its error and record included), never opens the FIFO
// or the device (inotify IN_OPEN on both stays silent), and plans the
// huge record without reading it.
func TestPlanListedHostileMetadata(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, mounttest.RealTempDir(t), nil)
	names := []string{"fifo", "dev", "huge", "mountedrec", "mountedmeta", "linkmeta", "filemeta", "fine"}
	var specs []volume.Spec
	for _, n := range names {
		specs = append(specs, emptyDirSpec(n, volume.StorageMediumDefault))
	}
	pod := e.pod(specs...)
	for _, n := range names {
		e.setUp(t, pod, n)
	}
	rec := func(n string) string { return filepath.Join(e.metaDir(t, n), metaFileName) }
	good, err := os.ReadFile(rec("fine"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"fifo", "dev", "huge"} {
		if err := os.Remove(rec(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(rec("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(rec("dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec("huge"), good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(rec("huge"), 1<<40); err != nil {
		t.Fatal(err)
	}
	forged := filepath.Join(t.TempDir(), "forged")
	if err := os.WriteFile(forged, good, 0o600); err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, forged, rec("mountedrec"))
	mounttest.Tmpfs(t, e.metaDir(t, "mountedmeta"), "")
	if err := os.WriteFile(rec("mountedmeta"), good, 0o600); err != nil {
		t.Fatal(err)
	}
	for n, mk := range map[string]func(string) error{
		"linkmeta": func(p string) error { return os.Symlink(e.metaDir(t, "fine"), p) },
		"filemeta": func(p string) error { return os.WriteFile(p, good, 0o600) },
	} {
		if err := os.RemoveAll(e.metaDir(t, n)); err != nil {
			t.Fatal(err)
		}
		if err := mk(e.metaDir(t, n)); err != nil {
			t.Fatal(err)
		}
	}

	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	for _, n := range []string{"fifo", "dev"} {
		if _, err := unix.InotifyAddWatch(in, rec(n), unix.IN_OPEN); err != nil {
			t.Fatal(err)
		}
	}
	planned := e.planBothWays(t, e, func(vd volume.VolumeDir, got Plan) {
		if vd.Volume != "fine" && got.meta != nil {
			t.Errorf("%s: PlanListed read a record %+v from what is not one", vd.Volume, got.meta)
		}
	})
	if planned != len(names) {
		t.Errorf("%d volumes planned, want %d", planned, len(names))
	}
	buf := make([]byte, 4096)
	if n, err := unix.Read(in, buf); err != unix.EAGAIN {
		t.Errorf("the FIFO or the device planted as a record was opened (inotify read %d bytes, %v)", n, err)
	}
}
