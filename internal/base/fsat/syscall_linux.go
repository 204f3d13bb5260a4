//go:build linux

package fsat

import (
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls below take a name and are made for every entry a scan
// looks at. golang.org/x/sys/unix hands each name to the kernel as a C
// string it allocates on the heap (ByteSliceFromString): some 25,000
// allocations a scan of 10,000 volumes, for names that are single
// components or short relative paths. These wrappers copy a name that
// fits into a buffer on the caller's stack instead, and fall back to the
// heap for a longer one (an absolute root path). Each is the package's
// one wrapper of its system call, retried on EINTR.

// nameMax is the longest name copied on the stack: NAME_MAX (255) and
// the NUL, which also holds the short relative paths OpenDir is given.
const nameMax = 256

// cName returns name NUL-terminated for the kernel, in buf when it fits,
// else on the heap. A name holding a NUL is EINVAL (the kernel would
// stop at it and act on another name), as unix.BytePtrFromString says.
func cName(buf *[nameMax]byte, name string) (*byte, error) {
	if len(name) >= len(buf) {
		return unix.BytePtrFromString(name)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return nil, unix.EINVAL
	}
	copy(buf[:], name)
	buf[len(name)] = 0
	return &buf[0], nil
}

// errnoErr returns e as an error, nil for 0. An Errno below 256 boxes
// into an interface without allocating.
func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// openatC is openat(2) of the NUL-terminated name p, retried on EINTR.
func openatC(dirfd int, p *byte, flags int, mode uint32) (int, error) {
	for {
		r, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), uintptr(mode), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return -1, errnoErr(e)
		}
		return int(r), nil
	}
}

// Openat is openat(2) with O_CLOEXEC, retried on EINTR.
func Openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	var buf [nameMax]byte
	p, err := cName(&buf, name)
	if err != nil {
		return -1, err
	}
	return openatC(dirfd, p, flags|unix.O_CLOEXEC, mode)
}

// Openat2 is openat2(2) (Linux 5.6), retried on EINTR. It adds nothing to
// how: O_CLOEXEC is the caller's to ask for.
func Openat2(dirfd int, name string, how *unix.OpenHow) (int, error) {
	var buf [nameMax]byte
	p, err := cName(&buf, name)
	if err != nil {
		return -1, err
	}
	for {
		r, _, e := unix.Syscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
			uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return -1, errnoErr(e)
		}
		return int(r), nil
	}
}

// Reopen opens the file fd refers to once more, with flags (O_CLOEXEC
// added): a new open file description of the same inode, with its own
// offset and access mode, reached through fd's /proc/self/fd magic link,
// which the kernel resolves to that very file whatever has happened to its
// name since. It turns an O_PATH descriptor into one ioctl and fchmod
// accept, or gives a walk a descriptor whose offset the caller's does not
// share (dup would).
func Reopen(fd int, flags int) (int, error) {
	var buf [32]byte
	b := append(buf[:0], "/proc/self/fd/"...)
	b = strconv.AppendInt(b, int64(fd), 10)
	b = append(b, 0)
	return openatC(unix.AT_FDCWD, &b[0], flags|unix.O_CLOEXEC, 0)
}

// procFds is a descriptor of the /proc/self/fd directory shared by the
// Dirs of one tree: OpenRoot's and every Dir opened from it, each holding
// a reference, the last to close closing it. A reopen through it walks one
// path component ("N") instead of four ("/proc/self/fd/N": the root, the
// procfs mount, the self symlink, fd), about 1 µs of the 4.5 a reopen
// costs (ReadFile reopens every file it reads). It is opened at the first
// reopen the tree makes, so a tree that reopens nothing pays nothing. A
// Dir of a caller's descriptor (FromFd) has none and reopens by path.
//
// It is this process's fd directory whatever happens to /proc later (the
// descriptor names the procfs directory, not a path), and O_CLOEXEC: a
// program nodevol starts does not get it.
type procFds struct {
	refs atomic.Int32
	fd   atomic.Int32 // procFdsUnopened until the first reopen, procFdsClosed after the last release
}

const (
	procFdsUnopened = -1
	procFdsClosed   = -2
)

func newProcFds() *procFds {
	p := &procFds{}
	p.refs.Store(1)
	p.fd.Store(procFdsUnopened)
	return p
}

// hold takes a reference for a new Dir of p's tree (p nil: none).
func (p *procFds) hold() *procFds {
	if p != nil {
		p.refs.Add(1)
	}
	return p
}

// release gives back a Dir's reference; the last closes the descriptor.
func (p *procFds) release() {
	if p == nil || p.refs.Add(-1) != 0 {
		return
	}
	if fd := p.fd.Swap(procFdsClosed); fd >= 0 {
		unix.Close(int(fd))
	}
}

// reopen is Reopen, through p's descriptor (opened now if it is not yet)
// when p is not nil and /proc/self/fd could be opened.
func (p *procFds) reopen(fd int, flags int) (int, error) {
	if p == nil {
		return Reopen(fd, flags)
	}
	dirfd := p.fd.Load()
	if dirfd == procFdsUnopened {
		nfd, err := Openat(unix.AT_FDCWD, "/proc/self/fd", unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return Reopen(fd, flags) // which fails the way it always did
		}
		if !p.fd.CompareAndSwap(procFdsUnopened, int32(nfd)) {
			unix.Close(nfd) // another goroutine of the tree opened it first
		}
		dirfd = p.fd.Load()
	}
	if dirfd < 0 {
		return Reopen(fd, flags)
	}
	var buf [24]byte
	b := strconv.AppendInt(buf[:0], int64(fd), 10)
	b = append(b, 0)
	return openatC(int(dirfd), &b[0], flags|unix.O_CLOEXEC, 0)
}

// statx is statx(2), retried on EINTR: the one call under StatMount and
// StatAt.
func statx(dirfd int, name string, flags int, mask int, sx *unix.Statx_t) error {
	var buf [nameMax]byte
	p, err := cName(&buf, name)
	if err != nil {
		return err
	}
	for {
		_, _, e := unix.Syscall6(unix.SYS_STATX, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags),
			uintptr(mask), uintptr(unsafe.Pointer(sx)), 0)
		if e != unix.EINTR {
			return errnoErr(e)
		}
	}
}
