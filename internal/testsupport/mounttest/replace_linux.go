package mounttest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// ReplaceKeepingLine unmounts the mount on dir and mounts fstype from
// source (with flags and data) in its place, trying to leave its line in
// the mount table as it was, byte for byte: the kernel hands out the
// lowest free classic mount ID and anonymous device number, so every free
// one below the mount's is taken first by a scratch tmpfs (and given back
// after). It reports whether the line was kept; other processes, which
// mount and unmount too, can make a try fail: the caller tries again
// (the mount on dir is then another one).
func ReplaceKeepingLine(t testing.TB, dir, source, fstype string, flags uintptr, data string) (*mountinfo.Info, bool) {
	t.Helper()
	want := lineOf(t, dir)
	scratch, err := os.MkdirTemp(t.TempDir(), "fill")
	if err != nil {
		t.Fatal(err)
	}
	fillers := occupyBelow(t, scratch, want)
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the mount's ID is freed after an RCU grace period
	err = unix.Mount(source, dir, fstype, flags, data)
	for _, f := range fillers {
		_ = unix.Unmount(f, unix.MNT_DETACH)
	}
	if err != nil {
		t.Fatal(err)
	}
	got := lineOf(t, dir)
	return got, *got == *want
}

// occupyBelow mounts scratch tmpfs under dir until one has both a mount
// ID and a device minor above want's: every lower one is then taken.
func occupyBelow(t testing.TB, dir string, want *mountinfo.Info) (mounted []string) {
	t.Helper()
	for i := 0; i < 20000; i++ {
		d := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("fill", d, "tmpfs", 0, "size=4k"); err != nil {
			t.Fatal(err)
		}
		mounted = append(mounted, d)
		s, err := fsat.StatMount(unix.AT_FDCWD, d, fsat.TableID)
		if err != nil {
			t.Fatal(err)
		}
		if s.ID > uint64(want.ID) && unix.Minor(s.Dev) > uint32(want.Minor) {
			return mounted
		}
	}
	t.Fatalf("20,000 scratch mounts and still IDs below the mount on %s's", want.Mountpoint)
	return nil
}

func lineOf(t testing.TB, dir string) *mountinfo.Info {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil || len(ms) != 1 {
		t.Fatalf("the mount on %s: %v, %v", dir, ms, err)
	}
	return ms[0]
}
