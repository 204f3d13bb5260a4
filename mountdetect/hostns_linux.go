package mountdetect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

const (
	// initialPIDNamespaceIno is PID_NS_INIT_INO (include/uapi/linux/nsfs.h),
	// the inode of the initial PID namespace since Linux 3.8.
	initialPIDNamespaceIno = 0xEFFFFFFC
	// initialMountNamespaceIno is MNT_NS_INIT_INO, the inode of the
	// initial mount namespace since Linux 6.18. Namespaces created later
	// are numbered from 0xF0000000 (PROC_DYNAMIC_FIRST) up, on every
	// kernel, so no other namespace ever has it.
	initialMountNamespaceIno = 0xEFFFFFF8
)

func checkMountNamespace(c *namespaceConfig) MountNamespace {
	self, err := readOwnMountNamespace(c.selfProc)
	if err != nil {
		return MountNamespace{Err: fmt.Errorf("this process's mount namespace: %w", err)}
	}
	ns := MountNamespace{Self: self}
	host, err := pid1MountNamespace(c.hostProc)
	if err == nil {
		ns.By, ns.Host, ns.State = EvidencePID1, host, MountNamespaceForeign
		if host == self {
			ns.State = MountNamespaceHost
		}
		return ns
	}
	ns.Err = err
	byInode := c.byInode
	if byInode == nil {
		byInode = func(self MountNamespaceID) MountNamespaceState {
			return stateByInode(self, kernelNumbersInitialMountNamespace())
		}
	}
	if state := byInode(self); state != MountNamespaceUnknown {
		ns.By, ns.State = EvidenceInitialInode, state
		ns.Host = MountNamespaceID{Dev: self.Dev, Ino: initialMountNamespaceIno}
	}
	return ns
}

// stateByInode tells from the inode of this process's own mount namespace
// alone: the initial namespace's fixed number means it is the host's, on
// any kernel (no other namespace ever gets that number); any other number
// means it is not, when the kernel numbers the initial namespace so
// (fixed), and tells nothing otherwise.
func stateByInode(self MountNamespaceID, fixed bool) MountNamespaceState {
	switch {
	case self.Ino == initialMountNamespaceIno:
		return MountNamespaceHost
	case fixed:
		return MountNamespaceForeign
	}
	return MountNamespaceUnknown
}

// readOwnMountNamespace reads proc/thread-self/ns/mnt: the namespace of
// the calling thread, which is that of every thread a goroutine may run on
// (Linux 3.17). proc/self/ns/mnt is the main thread's, which a goroutine
// that locked it and unshared (then exited, leaving it wedged) can have
// moved to another namespace than the rest of the process.
func readOwnMountNamespace(proc string) (MountNamespaceID, error) {
	return readNamespace(unix.AT_FDCWD, proc+"/thread-self/ns/mnt", proc+"/thread-self/ns/mnt", unix.CLONE_NEWNS)
}

// pid1MountNamespace returns the mount namespace of PID 1 of the proc
// filesystem at proc, provided PID 1 is the init of the initial PID
// namespace. /proc/1 is opened once and both namespace files are read
// relative to it.
func pid1MountNamespace(proc string) (MountNamespaceID, error) {
	dir := proc + "/1"
	fd, err := fsat.Openat(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return MountNamespaceID{}, pid1Error(&os.PathError{Op: "open", Path: dir, Err: err}, isProcFS(proc))
	}
	defer unix.Close(fd)
	pid, err := readNamespace(fd, "ns/pid", dir+"/ns/pid", unix.CLONE_NEWPID)
	if err != nil {
		return MountNamespaceID{}, pid1Error(err, true)
	}
	if pid.Ino != initialPIDNamespaceIno {
		return MountNamespaceID{}, fmt.Errorf("%s is pid:[%d], not the initial PID namespace: %w", dir+"/ns/pid", pid.Ino, ErrNotHostInit)
	}
	mnt, err := readNamespace(fd, "ns/mnt", dir+"/ns/mnt", unix.CLONE_NEWNS)
	if err != nil {
		return MountNamespaceID{}, pid1Error(err, true)
	}
	return mnt, nil
}

// pid1Error marks a failure to read PID 1 that is the kernel hiding it
// from this process: permission denied (no ptrace access to PID 1, or
// hidepid=noaccess), or, in a proc filesystem, no /proc/1 at all
// (hidepid=invisible: PID 1 exists in every PID namespace).
func pid1Error(err error, inProcFS bool) error {
	if errors.Is(err, fs.ErrPermission) || (inProcFS && errors.Is(err, fs.ErrNotExist)) {
		return fmt.Errorf("%w: %w", ErrPID1Hidden, err)
	}
	return err
}

// isProcFS reports whether dir is the root of a proc filesystem.
func isProcFS(dir string) bool {
	var st unix.Statfs_t
	err := fsat.Retry(func() error { return unix.Statfs(dir, &st) })
	return err == nil && uint32(st.Type) == unix.PROC_SUPER_MAGIC
}

// readNamespace opens name relative to dirfd (path names it in errors),
// checks that it is a namespace of type nstype (a CLONE_NEW* value), and
// returns its identity. The checks and the identity are all about the one
// open file.
func readNamespace(dirfd int, name, path string, nstype int) (MountNamespaceID, error) {
	// O_NONBLOCK: whatever a directory that is not a proc filesystem holds
	// under that name (a FIFO), opening it must not hang.
	fd, err := fsat.Openat(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return MountNamespaceID{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if err := fsat.Retry(func() error { return unix.Fstatfs(fd, &sfs) }); err != nil {
		return MountNamespaceID{}, &os.PathError{Op: "fstatfs", Path: path, Err: err}
	}
	if uint32(sfs.Type) != unix.NSFS_MAGIC {
		return MountNamespaceID{}, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: not on nsfs (filesystem magic %#x)", ErrNotNamespace, uint32(sfs.Type))}
	}
	got, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return MountNamespaceID{}, &os.PathError{Op: "ioctl NS_GET_NSTYPE", Path: path, Err: err}
	}
	if got != nstype {
		return MountNamespaceID{}, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: namespace type %#x, want %#x", ErrNotNamespace, got, nstype)}
	}
	var st unix.Stat_t
	if err := fsat.Retry(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return MountNamespaceID{}, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	return MountNamespaceID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// kernelNumbersInitialMountNamespace reports whether the running kernel
// gives the initial mount namespace the fixed inode MNT_NS_INIT_INO:
// Linux 6.18 and later.
func kernelNumbersInitialMountNamespace() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 18)
}

// kernelAtLeast reports whether a kernel release such as "6.18.44-fc" is
// major.minor or later; false when it does not parse.
func kernelAtLeast(release string, major, minor int) bool {
	majStr, rest, ok := strings.Cut(release, ".")
	if !ok {
		return false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		rest = rest[:end]
	}
	maj, err1 := strconv.Atoi(majStr)
	mn, err2 := strconv.Atoi(rest)
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && mn >= minor)
}
