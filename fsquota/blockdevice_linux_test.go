package fsquota

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestBlockDevice: the quotactl fallback for kernels without quotactl_fd
// names the filesystem by its block device, found in the mount table as
// the source of the mount the directory is on, through a bind mount of a
// subdirectory too; a filesystem without one (tmpfs) is ENODEV.
func TestBlockDevice(t *testing.T) {
	mnt := mounttest.LoopFS(t, "ext4", 16<<20, "")
	sub := filepath.Join(mnt, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	bind := filepath.Join(t.TempDir(), "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, sub, bind)
	tmp := mounttest.MemTempDir(t)
	for _, tc := range []struct {
		dir     string
		wantDev bool
	}{{mnt, true}, {sub, true}, {bind, true}, {tmp, false}} {
		fd, err := unix.Open(tc.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		r, err := describe(fd, tc.dir)
		if err != nil {
			unix.Close(fd)
			t.Fatal(err)
		}
		dev, err := (&kernelQuota{}).blockDevice(r)
		unix.Close(fd)
		if !tc.wantDev {
			if err == nil {
				t.Errorf("blockDevice(%s) = %q; want ENODEV", tc.dir, dev)
			}
			continue
		}
		var st unix.Stat_t
		if err != nil || unix.Stat(dev, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || uint64(st.Rdev) != r.dev {
			t.Errorf("blockDevice(%s) = %q, %v; want the block device of %d:%d", tc.dir, dev, err, unix.Major(r.dev), unix.Minor(r.dev))
		}
	}
}
