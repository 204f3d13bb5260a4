package emptydir

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// osMounter mounts with mount(2) and unmounts with umount2(2) without
// MNT_DETACH: a busy mount is an error, never a lazy detach that would hide
// the data still in use.
type osMounter struct{}

func (osMounter) Mount(source, target, fstype string, options []string) error {
	return unix.Mount(source, target, fstype, 0, strings.Join(options, ","))
}

func (osMounter) Unmount(target string) error { return unix.Unmount(target, 0) }

// kernelSupportsNoswap reports whether tmpfs takes the noswap option
// (Linux 6.3 and later).
var kernelSupportsNoswap = sync.OnceValue(func() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 3)
})

// releaseAtLeast parses "6.18.44-fc" style kernel releases.
func releaseAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err := strconv.Atoi(parts[0])
	if err != nil {
		return false
	}
	minStr := parts[1]
	for i, c := range minStr {
		if c < '0' || c > '9' {
			minStr = minStr[:i]
			break
		}
	}
	mn, err := strconv.Atoi(minStr)
	if err != nil {
		return false
	}
	return maj > major || (maj == major && mn >= minor)
}

// statfsUsage is the space and inodes in use on the filesystem at dir.
func statfsUsage(dir string) (bytes, inodes int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Blocks-st.Bfree) * int64(st.Bsize), int64(st.Files - st.Ffree), nil
}
