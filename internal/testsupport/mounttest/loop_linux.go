package mounttest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopFS creates a sparse image of size bytes in a temporary directory,
// formats it with mkfs.<fstype> (extra arguments passed on), loop-mounts it
// with the given mount options and returns the mount point. The mount is
// undone in Cleanup (the loop device is released with it). It skips the
// test, saying why, when mounting is not allowed here or mkfs.<fstype> is
// missing.
func LoopFS(tb testing.TB, fstype string, size int64, mountOpts string, mkfsArgs ...string) string {
	tb.Helper()
	mnt, err := MountLoop(tb, LoopImage(tb, fstype, size, mkfsArgs...), fstype, mountOpts)
	if err != nil {
		tb.Fatal(err)
	}
	return mnt
}

// ManyMounts mounts a small tmpfs on dir and n tiny tmpfs mounts inside it
// (dir/0 … dir/n-1), to make the mount table large; all vanish with the
// private namespace (and dir's own mount is undone in Cleanup).
func ManyMounts(tb testing.TB, dir string, n int) {
	tb.Helper()
	Tmpfs(tb, dir, "size=1m")
	for i := range n {
		d := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=4k"); err != nil {
			tb.Fatalf("mount %d of %d: %v", i, n, err)
		}
	}
}
