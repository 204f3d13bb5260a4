package emptydir

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	mountAPI    = sync.OnceValues(probeMountAPI)
	tmpfsNoswap = sync.OnceValues(probeTmpfsNoswap)
)

func probeMountAPI() (bool, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err == unix.ENOSYS {
		return false, nil
	}
	if err != nil {
		return false, &os.SyscallError{Syscall: "fsopen tmpfs", Err: err}
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return false, &os.SyscallError{Syscall: "fsconfig create", Err: err}
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err == unix.ENOSYS {
		return false, nil
	}
	if err != nil {
		return false, &os.SyscallError{Syscall: "fsmount", Err: err}
	}
	unix.Close(mnt) // detached: closing it unmounts it
	return true, nil
}

func probeTmpfsNoswap() (bool, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false, &os.SyscallError{Syscall: "fsopen tmpfs", Err: err}
	}
	defer unix.Close(fsfd)
	switch err := unix.FsconfigSetFlag(fsfd, "noswap"); err {
	case nil:
		return true, nil
	case unix.EINVAL: // "Unknown parameter", or refused in a user namespace
		return false, nil
	default:
		return false, &os.SyscallError{Syscall: "fsconfig noswap", Err: err}
	}
}

// kernelSupportsNoswap reports whether SetUp gives a Memory volume's
// tmpfs the noswap option: whether tmpfs takes it (TmpfsNoswap), or, when
// that cannot be asked here (a volume.SystemMounter that mounts for a
// process without CAP_SYS_ADMIN), whether the kernel is Linux 6.4 or
// later, where tmpfs has it.
func kernelSupportsNoswap() bool {
	ok, err := tmpfsNoswap()
	if err == nil {
		return ok
	}
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 4)
}

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
