//go:build linux

package fsat

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Retry calls fn until it fails with something other than EINTR.
func Retry(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// Dir is an open directory. Its path is for messages only: nothing is ever
// resolved through it. Its methods may run on several goroutines at once
// (each is system calls on its descriptor; the first listing takes the
// descriptor atomically, later ones list a descriptor of their own, and
// the Dirs of a tree share their /proc/self/fd descriptor by reference),
// but not Close: the caller closes a Dir once every other call on it has
// returned.
type Dir struct {
	fd   int
	path string
	// unlisted is 1 while fd is a descriptor this package opened for
	// reading (O_RDONLY) and nothing has listed it yet: its offset is at
	// the start, and the first EachEntry lists it through fd itself
	// instead of opening the directory again (atomic: swapped to 0 by
	// the lister).
	unlisted int32
	// proc is the /proc/self/fd descriptor of the tree d belongs to (nil
	// for a Dir made by FromFd): d holds one of its references.
	proc *procFds
	// borrowed says fd is the caller's (Borrow): Close leaves it open.
	borrowed bool
}

// OpenRoot opens the trusted directory path (absolute; symlinks in it are
// followed, like /var/lib/kubelet -> /data/kubelet).
func OpenRoot(path string) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: not absolute", ErrInvalidComponent)}
	}
	fd, err := Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: filepath.Clean(path), unlisted: 1, proc: newProcFds()}, nil
}

// FromFd makes a Dir of an open directory fd, which it then owns.
func FromFd(fd int, path string) *Dir { return &Dir{fd: fd, path: path} }

// Borrow makes a Dir of fd, an open directory its caller lends and keeps
// (Close gives back what the Dir holds and leaves fd open), in d's tree:
// files read through it and the Dirs opened from it share d's
// /proc/self/fd descriptor. With d nil it has none, like FromFd's; nor
// with fd negative (no descriptor), whose Dir's Close is a no-op that
// would never give back a reference.
func (d *Dir) Borrow(fd int, path string) *Dir {
	b := &Dir{fd: fd, path: path, borrowed: true}
	if d != nil && fd >= 0 {
		b.proc = d.proc.hold()
	}
	return b
}

// Fd is the directory's file descriptor, valid until Close.
func (d *Dir) Fd() int { return d.fd }

// Path is the directory's path as it was reached, for messages.
func (d *Dir) Path() string { return d.path }

// Join is the path of name in d, for messages.
func (d *Dir) Join(name string) string { return d.path + "/" + name }

// ProcPath names the entry name of d through d's descriptor
// ("/proc/self/fd/N/name"): a path the kernel resolves from exactly this
// directory, for system calls that take no directory fd (umount2, and
// helpers that take paths). With name "" it names d itself.
func (d *Dir) ProcPath(name string) string {
	p := "/proc/self/fd/" + strconv.Itoa(d.fd)
	if name != "" {
		p += "/" + name
	}
	return p
}

// Close closes the directory (one of a borrowed descriptor stays open:
// Borrow). Closing a nil Dir is a no-op.
func (d *Dir) Close() error {
	if d == nil || d.fd < 0 {
		return nil
	}
	var err error
	if !d.borrowed {
		err = unix.Close(d.fd)
	}
	d.fd = -1
	d.proc.release()
	d.proc = nil
	return err
}

// sentinelErrno makes ErrSymlink and ErrNotRegular errors also match the
// errno the kernel gave.
type sentinelErrno struct {
	sentinel error
	errno    syscall.Errno
}

func (e sentinelErrno) Error() string { return e.sentinel.Error() }
func (e sentinelErrno) Is(target error) bool {
	return target == e.sentinel || target == e.errno
}

// checkRel refuses an absolute path and one with an empty, "." or ".."
// component (or a NUL), without allocating for a valid one: OpenDir's
// one-call path needs no split.
func checkRel(rel string) error {
	if strings.HasPrefix(rel, "/") {
		return fmt.Errorf("%w: %q is absolute", ErrInvalidComponent, rel)
	}
	if rel == "" {
		return nil
	}
	for rest := rel; ; {
		p, after, more := strings.Cut(rest, "/")
		if p == "" || p == "." || p == ".." || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("%w: %q in %q", ErrInvalidComponent, p, rel)
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// Option changes how OpenDir and MkdirAll treat the components they open.
type Option int

const (
	// SameMount requires every component opened to be on the same mount
	// as d and not itself the root of a mount: nothing reached below d may
	// sit on a filesystem mounted in the way (ErrOtherMount otherwise).
	SameMount Option = 1 << iota
	// slowWalk turns off openDirFast (tests run both ways).
	slowWalk
)

// OpenDir opens the directory rel below d, one component at a time with
// O_NOFOLLOW|O_DIRECTORY. A missing component is an error matching
// fs.ErrNotExist, a symlink one matching ErrSymlink, a non-directory one
// matching syscall.ENOTDIR; each names the component.
func (d *Dir) OpenDir(rel string, opts ...Option) (*Dir, error) {
	return d.walk(rel, false, 0, opts)
}

// MkdirAll is OpenDir that creates missing components with mode (exactly:
// the umask does not apply to components it creates).
func (d *Dir) MkdirAll(rel string, mode uint32, opts ...Option) (*Dir, error) {
	return d.walk(rel, true, mode, opts)
}

func (d *Dir) walk(rel string, create bool, mode uint32, opts []Option) (*Dir, error) {
	if err := checkRel(rel); err != nil {
		return nil, &os.PathError{Op: "openat", Path: d.Join(rel), Err: err}
	}
	var o Option
	for _, x := range opts {
		o |= x
	}
	if !create && rel != "" && o&slowWalk == 0 {
		if dir, ok := d.openDirFast(rel, o); ok {
			return dir, nil
		}
	}
	var parts []string
	if rel != "" {
		parts = strings.Split(rel, "/")
	}
	var mnt uint64
	if o&SameMount != 0 {
		s, err := StatMount(d.fd, "", MountKey)
		if err != nil {
			return nil, &os.PathError{Op: "statx", Path: d.path, Err: err}
		}
		mnt = s.Key()
	}
	// With SameMount, each component is checked through an O_PATH
	// descriptor before it is opened for real (openChild): opening a
	// mount point reaches the mounted filesystem (a FUSE daemon that
	// stopped answering would block), O_PATH asks nothing of it, and the
	// real open is a reopen of that descriptor, which a mount made on the
	// name since does not redirect. Nothing is asked of the filesystem:
	// statx with AT_STATX_DONT_SYNC, mount IDs only.
	var check func(fd int, path string) error
	if o&SameMount != 0 {
		check = func(fd int, path string) error {
			s, err := StatMount(fd, "", MountKey)
			if err != nil {
				return &os.PathError{Op: "statx", Path: path, Err: err}
			}
			if s.Key() != mnt || s.Root {
				return &os.PathError{Op: "openat", Path: path, Err: ErrOtherMount}
			}
			return nil
		}
	}
	cur := &Dir{fd: d.fd, path: d.path, proc: d.proc} // d itself, not owned: holds no reference
	owned := false
	for _, name := range parts {
		next, err := cur.openChild(name, create, mode, check)
		if owned {
			cur.Close()
		}
		if err != nil {
			return nil, err
		}
		cur, owned = next, true
	}
	if !owned { // rel was empty: a new descriptor for d itself
		fd, err := Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, &os.PathError{Op: "openat", Path: d.path, Err: err}
		}
		cur = &Dir{fd: fd, path: d.path, unlisted: 1, proc: d.proc.hold()}
	}
	return cur, nil
}

// openDirFast opens the directory rel (valid components, at least one)
// below d in one openat2 call that refuses what the walk one component at
// a time refuses: a symlink anywhere (RESOLVE_NO_SYMLINKS, with
// O_NOFOLLOW for the last component), an escape (RESOLVE_BENEATH) and,
// with SameMount, any mount crossing (RESOLVE_NO_XDEV: the kernel stops
// with EXDEV at a mount point, before it asks the mounted filesystem
// anything, as the walk's statx before each open does). The directory
// opened is then on d's mount and is not a mount root, which is what the
// walk's statx after each open checks. It says false on any failure,
// openat2 missing (Linux < 5.6) or blocked included: the caller then
// walks one component at a time, which fails with the error that names
// the component (or succeeds, if the tree changed meanwhile). It never
// creates anything.
//
// A scan opens a few directories per volume this way, each two or three
// components below a pod directory: one system call instead of three per
// component (statx, openat, statx) and a close per intermediate.
func (d *Dir) openDirFast(rel string, o Option) (*Dir, bool) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH,
	}
	if o&SameMount != 0 {
		how.Resolve |= unix.RESOLVE_NO_XDEV
	}
	fd, err := Openat2(d.fd, rel, &how)
	if err != nil {
		return nil, false
	}
	return &Dir{fd: fd, path: d.Join(rel), unlisted: 1, proc: d.proc.hold()}, true
}

// openChild opens the directory name in d (creating it with mode when
// create and it is missing), never following a symlink. It is opened
// O_PATH first; check, when not nil, is asked about that descriptor, and
// only then is it reopened for reading (from its magic link, never by
// name again).
func (d *Dir) openChild(name string, create bool, mode uint32, check func(fd int, path string) error) (*Dir, error) {
	p := d.Join(name)
	created := false
	for range 2 {
		pfd, err := Openat(d.fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err == nil {
			if check != nil {
				if err := check(pfd, p); err != nil {
					unix.Close(pfd)
					return nil, err
				}
			}
			fd, err := d.proc.reopen(pfd, unix.O_RDONLY|unix.O_DIRECTORY)
			unix.Close(pfd)
			if err != nil {
				return nil, &os.PathError{Op: "openat", Path: p, Err: err}
			}
			if created {
				// mkdirat applies the umask; the mode is set exactly,
				// on the directory checked, not by name.
				if err := Retry(func() error { return unix.Fchmod(fd, mode) }); err != nil {
					unix.Close(fd)
					return nil, &os.PathError{Op: "fchmod", Path: p, Err: err}
				}
			}
			return &Dir{fd: fd, path: p, unlisted: 1, proc: d.proc.hold()}, nil
		}
		if err == unix.ENOENT && create {
			err := Retry(func() error { return unix.Mkdirat(d.fd, name, mode) })
			if err != nil && err != unix.EEXIST {
				return nil, &os.PathError{Op: "mkdirat", Path: p, Err: err}
			}
			created = err == nil
			continue
		}
		return nil, &os.PathError{Op: "openat", Path: p, Err: d.explain(name, err)}
	}
	return nil, &os.PathError{Op: "openat", Path: p, Err: unix.ENOENT}
}

// explain turns ELOOP and ENOTDIR from an O_NOFOLLOW|O_DIRECTORY open into
// errors that say what is there.
func (d *Dir) explain(name string, err error) error {
	if err != unix.ELOOP && err != unix.ENOTDIR {
		return err
	}
	if st, err := d.Lstat(name); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return sentinelErrno{ErrSymlink, unix.ELOOP}
	}
	if err == unix.ELOOP {
		return sentinelErrno{ErrSymlink, unix.ELOOP}
	}
	return err
}

// Lstat is the lstat of name in d (a symlink not followed): Dev, Ino,
// Mode, Uid, Gid, Rdev, Size, Blocks and Ctim are filled in.
//
// It is statx with AT_STATX_DONT_SYNC underneath: exact on a local
// filesystem, and a FUSE filesystem mounted on name whose daemon stopped
// answering is not asked (its cached attributes are reported).
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	return d.statx(name, unix.AT_SYMLINK_NOFOLLOW)
}

// Stat is Lstat of d itself.
func (d *Dir) Stat() (unix.Stat_t, error) {
	return d.statx("", unix.AT_EMPTY_PATH)
}

// statx is StatAt of name in d; its error names name in d (d itself for
// "").
func (d *Dir) statx(name string, flags int) (unix.Stat_t, error) {
	st, err := StatAt(d.fd, name, flags)
	if err != nil {
		path := d.path
		if name != "" {
			path = d.Join(name)
		}
		return st, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	return st, nil
}

// StatAt is the stat of name in the directory open as fd (flags:
// AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH for fd itself), filled in as Lstat
// fills it, by statx with AT_STATX_DONT_SYNC: a FUSE filesystem whose
// daemon stopped answering is not asked. Its error is the system call's.
func StatAt(fd int, name string, flags int) (unix.Stat_t, error) {
	var st unix.Stat_t
	var sx unix.Statx_t
	if err := statx(fd, name, flags|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, unix.STATX_BASIC_STATS, &sx); err != nil {
		return st, err
	}
	st.Ctim = unix.NsecToTimespec(sx.Ctime.Sec*1e9 + int64(sx.Ctime.Nsec)) // Timespec's fields are 32 bits wide on 386 and arm
	st.Dev = unix.Mkdev(sx.Dev_major, sx.Dev_minor)
	st.Ino = sx.Ino
	st.Mode = uint32(sx.Mode)
	st.Uid, st.Gid = sx.Uid, sx.Gid
	st.Rdev = unix.Mkdev(sx.Rdev_major, sx.Rdev_minor)
	st.Size = int64(sx.Size)
	st.Blocks = int64(sx.Blocks)
	return st, nil
}

// ReadFile reads the regular file name in d, which must not be a symlink
// and must hold at most max bytes. Anything else (a FIFO, a device, a
// file something is mounted on, whenever it was mounted) is refused
// without being opened; a file that grows while it is read is refused
// once it passes max.
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) {
	return d.readFile(name, max)
}

// readFile is ReadFile.
//
// The file's type and size are those statx gave of the O_PATH descriptor
// openRegular checked: the descriptor it returns is a reopen of that very
// inode (the magic link names the open file, no name is resolved again),
// so an fstat of it would only say the same once more. The size sizes the
// buffer and refuses a file already over max before anything is read;
// the reads enforce max on what they return, whatever happened to the
// file since.
//
// The buffer holds the file and one byte more, so that a read returning
// exactly the size statx gave, without that byte, is taken for the whole
// file, with no second read to confirm the end. A short read alone would
// not do: procfs and sysfs files (seq_file) return one page at a time and
// say they are empty, and a FUSE daemon may return less than asked
// anywhere in a file. A read that stops exactly where statx said the file
// ends agrees with it: on a local filesystem a read stops short only at
// the end of the file (or at an error, which the next read would report,
// there too); elsewhere a filesystem would have to answer in a piece that
// ends exactly there. Any other read goes on until read returns 0.
func (d *Dir) readFile(name string, max int64) ([]byte, error) {
	if max < 0 { // every file is larger; openRegular's -1 means no cap
		return nil, &os.PathError{Op: "read", Path: d.Join(name), Err: fmt.Errorf("%w: at most %d bytes expected", ErrTooLarge, max)}
	}
	fd, s, err := d.openRegular(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, max)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, &os.PathError{Op: "read", Path: d.Join(name), Err: err}
		}
		return nil, &os.PathError{Op: "open", Path: d.Join(name), Err: err}
	}
	defer unix.Close(fd)
	// Read into a buffer of the size statx gave and one byte more, grown
	// (up to max and one byte) only for a file that grew meanwhile.
	b := make([]byte, 0, s.Size+1)
	for {
		if len(b) == cap(b) {
			if int64(len(b)) > max {
				return nil, &os.PathError{Op: "read", Path: d.Join(name), Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
			}
			b = slices.Grow(b, int(min(max+1-int64(len(b)), int64(len(b))+512)))
		}
		var n int
		err := Retry(func() (err error) { n, err = unix.Read(fd, b[len(b):cap(b)]); return err })
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: d.Join(name), Err: err}
		}
		if n <= 0 {
			break
		}
		b = b[:len(b)+n]
		if uint64(len(b)) == s.Size && len(b) < cap(b) {
			break // the size statx gave, and not one byte more
		}
	}
	if int64(len(b)) > max {
		return nil, &os.PathError{Op: "read", Path: d.Join(name), Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
	}
	return b, nil
}

// openRegular opens the regular file name in d with flags, never opening
// anything else. Opening a device can act on it (a watchdog arms), a FIFO
// can block, and a file something is mounted on reaches the mounted
// filesystem, which may never answer (a FUSE daemon that hung); whoever
// can write into d can swap any of them in between any two calls. So the
// name is opened O_PATH (which opens nothing: it asks neither a driver
// nor the mounted filesystem anything) with openat2's RESOLVE_NO_XDEV,
// with which the kernel refuses (EXDEV) to step onto a mount on the name,
// that descriptor is checked (a regular file, not a mount root), and the
// file reopened from it (its magic link), never by name again. Before
// openat2 (Linux 5.6) the O_PATH open is openat's, and the check's mount
// root test stands for RESOLVE_NO_XDEV.
//
// It returns what statx said of the file too. With max >= 0, a file
// larger than max is refused (ErrTooLarge) without being opened.
func (d *Dir) openRegular(name string, flags int, max int64) (int, MountStat, error) {
	pfd, err := Openat2(d.fd, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH,
	})
	switch err {
	case nil:
	case unix.EXDEV:
		return -1, MountStat{}, ErrOtherMount
	case unix.ELOOP:
		return -1, MountStat{}, sentinelErrno{ErrSymlink, unix.ELOOP}
	case unix.ENOSYS, unix.EPERM, unix.EINVAL, unix.EAGAIN:
		// No openat2 (Linux < 5.6, or a seccomp filter), or one that
		// asks to be retried.
		if pfd, err = Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW, 0); err != nil {
			return -1, MountStat{}, err
		}
	default:
		return -1, MountStat{}, err
	}
	defer unix.Close(pfd)
	s, err := StatMount(pfd, "", 0)
	if err != nil {
		return -1, MountStat{}, err
	}
	if err := regularHere(s); err != nil {
		return -1, MountStat{}, err
	}
	if max >= 0 && s.Size > uint64(max) {
		return -1, MountStat{}, fmt.Errorf("%w: %d bytes, at most %d expected", ErrTooLarge, s.Size, max)
	}
	fd, err := d.proc.reopen(pfd, flags)
	if err != nil {
		return -1, MountStat{}, err
	}
	return fd, s, nil
}

// regularHere is openRegular's check of what statx said of a file: a
// regular file that nothing is mounted on.
func regularHere(s MountStat) error {
	switch {
	case s.Root:
		return ErrOtherMount
	case s.Mode == unix.S_IFLNK:
		return sentinelErrno{ErrSymlink, unix.ELOOP}
	case s.Mode != unix.S_IFREG:
		return fmt.Errorf("%w (mode %#o)", ErrNotRegular, s.Mode)
	}
	return nil
}

func tempPrefix(name string) string { return "." + name + ".tmp-" }

// IsTempOf reports whether entry is a temporary file WriteFileAtomic
// makes for name (".<name>.tmp-" and 16 hex digits): what an interrupted
// write leaves behind.
func IsTempOf(entry, name string) bool {
	rest, ok := strings.CutPrefix(entry, tempPrefix(name))
	if !ok || len(rest) != 16 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// Random fills b with random bytes from the kernel, getrandom(2) (Linux
// 3.17), as crypto/rand does on Linux, without linking crypto/rand:
// crypto/rand brings the FIPS 140 module's DRBG, AES and math/big, whose
// package initialisation every start of nodevol would pay, for the few
// bytes that make a name unique. Like crypto/rand.Read it cannot fail: it
// blocks until the kernel's pool is initialised (early boot only), and
// crashes the program on an error no supported kernel returns.
func Random(b []byte) {
	for len(b) > 0 {
		n, err := unix.Getrandom(b, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			panic("fsat: getrandom: " + err.Error())
		}
		b = b[n:]
	}
}

// WriteFileAtomic replaces name in d with data, durably: a temporary file
// in d is written, fsynced and renamed over name, then d is fsynced, so a
// crash leaves the old content or the new, never a mix or nothing. The
// file gets mode perm exactly (permission, setuid, setgid and sticky bits;
// the umask does not apply) and is owned by the caller. A symlink at name
// is replaced itself, never followed.
func (d *Dir) WriteFileAtomic(name string, data []byte, perm uint32) error {
	var rnd [8]byte
	Random(rnd[:])
	tmp := tempPrefix(name) + hex.EncodeToString(rnd[:])
	fd, err := Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, perm)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.Join(tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), d.Join(tmp))
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = unix.Unlinkat(d.fd, tmp, 0)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	// fchmod with the raw bits: os.FileMode(perm) would drop setuid,
	// setgid and sticky, and the umask must not apply either. After the
	// write: a write by a process without CAP_FSETID clears setuid.
	if err := Retry(func() error { return unix.Fchmod(fd, perm) }); err != nil {
		return &os.PathError{Op: "fchmod", Path: d.Join(tmp), Err: err}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	ok = true
	if err := Retry(func() error { return unix.Renameat(d.fd, tmp, d.fd, name) }); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return &os.PathError{Op: "rename", Path: d.Join(name), Err: err}
	}
	return d.Sync()
}

// OpenOwnFile opens name in d for reading and writing, creating it
// owner-only, never following a symlink, and checks that it is a regular
// file of this user's with one link, made owner-only: a FIFO or device
// planted there is refused without blocking, a hard link to another file
// is never written. For the files a process keeps of its own beside
// others' (a lock file, a log rewritten in place).
func (d *Dir) OpenOwnFile(name string) (*os.File, error) {
	path := d.Join(name)
	fd, err := Openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	if err != nil {
		if err == unix.ELOOP {
			return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %w", ErrSymlink, err)}
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	var bad error
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		bad = fmt.Errorf("%w (mode %#o)", ErrNotRegular, st.Mode&unix.S_IFMT)
	case st.Nlink != 1:
		bad = fmt.Errorf("has %d hard links; a lock file has one", st.Nlink)
	case int(st.Uid) != os.Geteuid():
		bad = fmt.Errorf("is owned by uid %d, not by this process's %d", st.Uid, os.Geteuid())
	}
	if bad == nil && st.Mode&0o7777 != 0o600 {
		if err := Retry(func() error { return unix.Fchmod(fd, 0o600) }); err != nil {
			bad = fmt.Errorf("fchmod 0600: %w", err)
		}
	}
	if bad != nil {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: bad}
	}
	return f, nil
}

// CreateEmpty creates name in d as an empty regular file with mode perm if
// it does not exist (never following a symlink), and fsyncs it and d.
func (d *Dir) CreateEmpty(name string, perm uint32) error {
	// A new file is created O_EXCL, which never opens what is there; one
	// that is there is opened as ReadFile opens it (openRegular), so that
	// a file of a filesystem that never answers, mounted on the name, is
	// refused instead of waited on. Removed in between: tried again.
	var fd int
	var err error
	for try := 0; try < 3; try++ {
		fd, err = Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NONBLOCK, perm)
		if err != unix.EEXIST {
			break
		}
		if fd, _, err = d.openRegular(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, -1); err != unix.ENOENT {
			break
		}
	}
	if err != nil {
		if err == unix.ELOOP {
			err = sentinelErrno{ErrSymlink, unix.ELOOP}
		}
		return &os.PathError{Op: "open", Path: d.Join(name), Err: err}
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = ErrNotRegular
	}
	if err == nil {
		err = unix.Fsync(fd)
	}
	unix.Close(fd)
	if err != nil {
		return &os.PathError{Op: "create", Path: d.Join(name), Err: err}
	}
	return d.Sync()
}

// Sync fsyncs the directory.
func (d *Dir) Sync() error {
	if err := Retry(func() error { return unix.Fsync(d.fd) }); err != nil {
		return &os.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// Remove unlinks the non-directory name in d (never following it). A
// missing name is not an error.
func (d *Dir) Remove(name string) error {
	err := Retry(func() error { return unix.Unlinkat(d.fd, name, 0) })
	if err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "unlinkat", Path: d.Join(name), Err: err}
	}
	return nil
}

// Rmdir removes the empty directory name in d. A missing name is not an
// error.
func (d *Dir) Rmdir(name string) error {
	err := Retry(func() error { return unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR) })
	if err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: d.Join(name), Err: err}
	}
	return nil
}

// Entry is a directory entry: its name and its type as lstat sees it.
type Entry struct {
	Name string
	Type fs.FileMode // fs.ModeDir, fs.ModeSymlink, ...; 0 for a regular file
}

// ReadEntries lists d's entries sorted by name (EachEntry, collected).
func (d *Dir) ReadEntries() ([]Entry, error) {
	var out []Entry
	err := d.EachEntry(func(e Entry) error { out = append(out, e); return nil })
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, err
}

// EachEntry calls fn for each of d's entries (not "." and ".."), in
// directory order, typed by the directory entry itself (getdents64
// d_type) or, where the filesystem does not say, by fstatat(2) relative
// to d without following symlinks — never by a path. It holds one 32 KiB
// buffer, whatever the directory's size: a directory an attacker filled
// costs time, not memory. Entries that vanish while listed are left out.
// An error from fn stops the listing and is returned (ErrStop: nil).
//
// The first listing of a Dir this package opened reads d's own descriptor
// (its offset at the start); any other opens the directory again, from d,
// so that listings never share an offset.
func (d *Dir) EachEntry(fn func(Entry) error) error {
	fd := d.fd
	if !atomic.CompareAndSwapInt32(&d.unlisted, 1, 0) {
		var err error
		if fd, err = Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
			return &os.PathError{Op: "openat", Path: d.path, Err: err}
		}
		defer unix.Close(fd)
	}
	bp := direntBufs.Get().(*[direntBufSize]byte)
	defer direntBufs.Put(bp)
	buf := bp[:]
	for {
		var n int
		err := Retry(func() (err error) { n, err = unix.Getdents(fd, buf); return err })
		if err != nil {
			return &os.PathError{Op: "getdents", Path: d.path, Err: err}
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			if off+19 > n {
				return &os.PathError{Op: "getdents", Path: d.path, Err: unix.EIO}
			}
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen == 0 || off+reclen > n {
				return &os.PathError{Op: "getdents", Path: d.path, Err: unix.EIO}
			}
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if string(name) == "." || string(name) == ".." {
				continue
			}
			e := Entry{Name: string(name)}
			if t, ok := direntType(typ); ok {
				e.Type = t
			} else {
				st, err := d.Lstat(e.Name)
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				if err != nil {
					return err
				}
				e.Type = fileType(st.Mode)
			}
			if err := fn(e); err != nil {
				if err == ErrStop {
					return nil
				}
				return err
			}
		}
	}
}

// direntBufs are EachEntry's buffers, reused: a fresh one was 32 KiB to
// zero for every directory listed (a scan lists tens of thousands).
var direntBufs = sync.Pool{New: func() any { return new([direntBufSize]byte) }}

const direntBufSize = 32 << 10

// direntType turns a d_type into an fs.FileMode type; false for
// DT_UNKNOWN (the filesystem does not fill it in).
func direntType(t uint8) (fs.FileMode, bool) {
	switch t {
	case unix.DT_DIR:
		return fs.ModeDir, true
	case unix.DT_LNK:
		return fs.ModeSymlink, true
	case unix.DT_REG:
		return 0, true
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, true
	case unix.DT_SOCK:
		return fs.ModeSocket, true
	case unix.DT_BLK:
		return fs.ModeDevice, true
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, true
	}
	return 0, false
}

// fileType turns st_mode's S_IFMT bits into an fs.FileMode type.
func fileType(mode uint32) fs.FileMode {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFREG:
		return 0
	}
	return fs.ModeIrregular
}
