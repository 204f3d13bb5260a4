package mounttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// LoopImage creates a sparse image of size bytes in a temporary directory,
// formats it with mkfs.<fstype> (extra arguments passed on) and returns its
// path, for a test that prepares the image or tries more than one way to
// mount it (MountLoop). It skips like LoopFS.
func LoopImage(tb testing.TB, fstype string, size int64, mkfsArgs ...string) string {
	tb.Helper()
	RequireMounts(tb)
	mkfs, err := exec.LookPath("mkfs." + fstype)
	if err != nil {
		Skip(tb, "mkfs.%s not installed (.ci/run installs it)", fstype)
	}
	img := filepath.Join(tb.TempDir(), fstype+".img")
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
	return img
}

// MountLoop loop-mounts the image img (fstype) with the given mount
// options on a new temporary directory and returns it; the mount is undone
// in Cleanup. Unlike LoopFS it returns a refused mount as an error (with
// mount's output) instead of failing the test, so the caller can say why
// or try another way, such as read-only.
func MountLoop(tb testing.TB, img, fstype, mountOpts string) (string, error) {
	tb.Helper()
	RequireMounts(tb)
	mnt := tb.TempDir()
	opts := "loop"
	if mountOpts != "" {
		opts += "," + mountOpts
	}
	if out, err := exec.Command("mount", "-t", fstype, "-o", opts, img, mnt).CombinedOutput(); err != nil {
		return "", fmt.Errorf("mount -t %s -o %s %s: %v: %s", fstype, opts, img, err, out)
	}
	tb.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	return mnt, nil
}
