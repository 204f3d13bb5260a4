package mounttest

import (
	"os"
	"os/exec"
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
	RequireMounts(tb)
	mkfs, err := exec.LookPath("mkfs." + fstype)
	if err != nil {
		tb.Skipf("skipping: mkfs.%s not installed (.ci/run installs it)", fstype)
	}
	dir := tb.TempDir()
	img := filepath.Join(dir, fstype+".img")
	f, err := os.Create(img)
	if err != nil {
		tb.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	args := append(append([]string{}, mkfsArgs...), img)
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		tb.Fatalf("mkfs.%s: %v\n%s", fstype, err, out)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		tb.Fatal(err)
	}
	opts := "loop"
	if mountOpts != "" {
		opts += "," + mountOpts
	}
	if out, err := exec.Command("mount", "-t", fstype, "-o", opts, img, mnt).CombinedOutput(); err != nil {
		tb.Fatalf("mount -o %s %s: %v\n%s", opts, img, err, out)
	}
	tb.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
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
