package mountdetect

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testhook"
)

const (
	// defaultMaxOpen bounds the directory fds one serial walk keeps open.
	// Deeper directories are reached again through ".." (verified by device
	// and inode) instead of keeping an fd per level, so trees far deeper
	// than PATH_MAX need neither unbounded fds nor path strings.
	defaultMaxOpen = 128
	// maxPasses bounds how often one directory is listed again after its
	// rmdir found it not empty (entries skipped by a reshuffled directory,
	// Go issue 20841, or created concurrently).
	maxPasses = 64
	// direntBufSize is the getdents64 buffer: tens of thousands of entries
	// a call, so that sorting a batch by inode approaches a full sort.
	direntBufSize = 1 << 20
)

// Test seams: called with a directory's path just before the walk opens it
// and just after, so tests can mount or swap things at exactly those
// moments. Always nil outside tests.
var testHookBeforeEnter, testHookAfterEnter func(path string)

// dirNode is one directory being removed: a frame of the serial walk or a
// node of the parallel one.
type dirNode struct {
	parent *dirNode // nil for the pseudo-node holding the start path's parent
	name   string
	// shown is set on the start directory and the pseudo-node above it:
	// the path errors name the start directory by (the caller's, never a
	// /proc/self/fd name).
	shown string
	fd    int // -1 when closed (evicted by a deep serial walk, or not yet opened)
	depth int
	// dev and ino identify the directory when its fd has been evicted, so
	// that reopening it through ".." can prove it is the same directory.
	dev, ino uint64

	// Serial walk state: subdirectories found in the current batch.
	subdirs []string
	next    int
	eof     bool

	progress atomic.Bool // this pass removed something
	kept     atomic.Bool // something was deliberately left here (a mount, an error)
	passes   int

	// keptNames are the entries deliberately left here (see keep). A
	// directory reopened through ".." is listed again from offset 0 (a new
	// fd has no position), where those entries reappear: list skips them,
	// or a kept subtree deeper than maxOpen would be walked, and its
	// ancestor evicted and reopened, forever. reopened is only ever set on
	// a node owned by one serial walk, so list reads keptNames unlocked.
	keptMu    sync.Mutex
	keptNames map[string]struct{}
	reopened  bool

	// Parallel walk: outstanding tasks (its own listing plus children).
	pending atomic.Int64
}

// path is the directory's full path, for error messages only: the start
// directory's shown name followed by the names below it.
func (n *dirNode) path() string {
	var names []string
	x := n
	for ; x.shown == ""; x = x.parent {
		names = append(names, x.name)
	}
	if len(names) == 0 {
		return x.shown
	}
	var b strings.Builder
	b.WriteString(strings.TrimRight(x.shown, "/"))
	for i := len(names) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(names[i])
	}
	return b.String()
}

// child is the path of n's entry name. The pseudo-node holding the start
// directory's parent has one child, the start entry, shown as the caller
// named it.
func (n *dirNode) child(name string) string {
	if n.parent == nil {
		return n.shown
	}
	return n.path() + "/" + name
}

// walk is the state shared by every goroutine of one RemoveAll.
type walk struct {
	s       strategy
	rootMnt uint64
	maxOpen int
	hook    testhook.Hook // called after each removal; nil outside tests

	mu      sync.Mutex
	crossed []Mount
	errs    []error // the failures with the smallest paths (see fail)
	dropped int     // failures beyond maxErrors, no longer held
	aborted atomic.Bool
}

// maxErrors bounds the failures one RemoveAll reports one by one; the rest
// are counted. A tree of a million files that all fail must not hold a
// million errors.
const maxErrors = 100

func (w *walk) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
	if len(w.errs) >= 2*maxErrors {
		w.trimErrors()
	}
}

// trimErrors keeps the maxErrors failures with the smallest paths, so that
// which failures are reported does not depend on the order the (parallel)
// walk met them.
func (w *walk) trimErrors() {
	slices.SortStableFunc(w.errs, func(a, b error) int { return strings.Compare(errPath(a), errPath(b)) })
	if len(w.errs) > maxErrors {
		clear(w.errs[maxErrors:])
		w.dropped += len(w.errs) - maxErrors
		w.errs = w.errs[:maxErrors]
	}
}

// errPath is the path a failure is sorted by.
func errPath(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Path
	}
	return err.Error()
}

// foundMount records a mount met during the walk; describe fills in its
// filesystem type when it can (the entry is opened O_PATH, which does
// nothing to it).
func (w *walk) foundMount(dirfd int, name, path string) {
	// Its type and source come from the mount table, found by the mount
	// ID statx gives (AT_STATX_DONT_SYNC, nothing else asked): asking the
	// mount itself (fstatfs) would reach its filesystem, and a FUSE daemon
	// that stopped answering would block the walk.
	m := Mount{MountPoint: path}
	var sx unix.Statx_t
	err := ignoringEINTR(func() error {
		return unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &sx)
	})
	if err == nil && sx.Mask&unix.STATX_MNT_ID != 0 {
		id := int(sx.Mnt_id)
		if infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) { return i.ID != id, i.ID == id }); err == nil && len(infos) == 1 {
			m.FSType, m.Source = infos[0].FSType, infos[0].Source
		}
	}
	w.mu.Lock()
	w.crossed = append(w.crossed, m)
	w.mu.Unlock()
}

func (w *walk) abort(err error) {
	w.fail(err)
	w.aborted.Store(true)
}

// result turns what the walk met into RemoveAll's error: nil, the one
// failure itself, or every failure joined (mounts met first, then the
// rest sorted by path, at most maxErrors of them and a *MoreErrorsError
// counting the others).
func (w *walk) result(path string) error {
	var errs []error
	if len(w.crossed) > 0 {
		sortMounts(w.crossed)
		errs = append(errs, &CrossesMountError{Path: path, Mounts: w.crossed, DuringWalk: true})
	}
	w.trimErrors()
	errs = append(errs, w.errs...)
	if w.dropped > 0 {
		errs = append(errs, &MoreErrorsError{N: w.dropped})
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

func unlinkatPtr(dirfd int, name *byte, flags int) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)), uintptr(flags))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

func unlinkat(dirfd int, name string, flags int) error {
	return ignoringEINTR(func() error { return unix.Unlinkat(dirfd, name, flags) })
}

func removeAll(path string, c *config) error {
	dir, base, err := validateRemovePath(path)
	if err != nil {
		return err
	}
	if err := c.walkSafe(path); err != nil {
		return err
	}
	pfd, err := openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(pfd)
	return removeAt(pfd, base, filepath.Join(dir, base), path, c)
}

func removeAllAt(dirfd int, name, path string, c *config) error {
	if err := validateRemoveName(name, path); err != nil {
		return err
	}
	if path == "" {
		path = name
	}
	if dirfd < 0 {
		return &os.PathError{Op: "unlinkat", Path: path, Err: unix.EBADF}
	}
	if err := c.walkSafe(path); err != nil {
		return err
	}
	return removeAt(dirfd, name, path, path, c)
}

// walkSafe refuses to run on a kernel that cannot check every directory of
// the walk for a mount boundary.
func (c *config) walkSafe(path string) error {
	if c.strategy.walkSafe() {
		return nil
	}
	return fmt.Errorf("remove %s: %w: the kernel offers neither statx mount IDs (Linux 5.8) nor openat2 (Linux 5.6), so mounts appearing during the walk could not be detected", path, ErrUnsupported)
}

// removeAt is RemoveAll once the parent directory is open as pfd (which
// stays the caller's): it removes the entry base of pfd. shown names that
// entry in every error message and mount it reports, and path is the
// path the caller gave, for CrossesMountError.Path.
func removeAt(pfd int, base, shown, path string, c *config) error {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &os.PathError{Op: "fstatat", Path: shown, Err: err}
	}
	w := &walk{s: c.strategy, maxOpen: c.maxOpen, hook: c.hook}
	if w.maxOpen <= 0 {
		w.maxOpen = defaultMaxOpen
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		// The link itself is removed; its target is not touched.
		return removeEntry(pfd, base, shown)
	default:
		mounted, sure, err := childIsMountRoot(pfd, base, shown, &st, c.strategy)
		if err != nil {
			return err
		}
		if mounted || !sure {
			w.foundMount(pfd, base, shown)
			return &CrossesMountError{Path: path, Mounts: w.crossed}
		}
		if err := removeEntry(pfd, base, shown); err != nil {
			if errors.Is(err, unix.EBUSY) {
				w.foundMount(pfd, base, shown)
				return &CrossesMountError{Path: path, Mounts: w.crossed}
			}
			return err
		}
		return nil
	}

	fd, err := openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		switch err {
		case unix.ENOENT:
			return nil
		case unix.ENOTDIR, unix.ELOOP:
			// Replaced by a file or symlink since the fstatat: remove that.
			return removeEntry(pfd, base, shown)
		}
		return &os.PathError{Op: "openat", Path: shown, Err: err}
	}
	root := &dirNode{parent: &dirNode{fd: pfd, shown: shown}, name: base, fd: fd, depth: 1, shown: shown}
	closeRoot := true
	defer func() {
		if closeRoot {
			unix.Close(fd)
		}
	}()

	// Refuse before touching: the directory itself must not be a mount
	// root, and nothing may be mounted beneath it.
	selfMounted := false
	if mask := c.strategy.statxMask(); mask != 0 {
		var sx unix.Statx_t
		if err := ignoringEINTR(func() error { return unix.Statx(fd, "", unix.AT_EMPTY_PATH, mask, &sx) }); err != nil {
			return &os.PathError{Op: "statx", Path: shown, Err: err}
		}
		if sx.Mask&uint32(mask) == 0 {
			return &os.PathError{Op: "statx", Path: shown, Err: fmt.Errorf("kernel returned no mount ID: %w", ErrUnsupported)}
		}
		w.rootMnt = sx.Mnt_id
		selfMounted = sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
	} else {
		mounted, _, err := childIsMountRoot(pfd, base, shown, &st, c.strategy)
		if err != nil {
			return err
		}
		selfMounted = mounted
	}
	at, beneath, real, err := mountsAtAndBeneath(fd, shown)
	if err != nil {
		return fmt.Errorf("remove %s: list mounts: %w", path, err)
	}
	// Name the mounts as the caller names the tree, as mounts met during
	// the walk are named.
	renameWithin(at, real, shown)
	renameWithin(beneath, real, shown)
	if selfMounted && len(at) == 0 {
		w.foundMount(pfd, base, shown)
		at = w.crossed
	}
	if len(at) > 0 || len(beneath) > 0 {
		return &CrossesMountError{Path: path, Mounts: append(at, beneath...)}
	}

	closeRoot = false // the walk owns fd now
	if c.workers > 1 {
		w.parallel(root, c.workers)
	} else {
		sc := scratchPool.Get().(*scratch)
		w.serial(root, sc)
		scratchPool.Put(sc)
	}
	return w.result(path)
}

// removeEntry unlinks a non-directory entry, treating a vanished entry as
// removed.
func removeEntry(dirfd int, name, path string) error {
	err := unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	return &os.PathError{Op: "unlinkat", Path: path, Err: err}
}

// openDir opens the subdirectory name of parent without following
// symlinks and without crossing a mount. crossed is true when name is the
// root of another mount; nothing is opened then.
func (w *walk) openDir(parent *dirNode, name string) (fd int, crossed bool, err error) {
	if w.s == strategyOpenat2 {
		err = ignoringEINTR(func() (err error) {
			fd, err = unix.Openat2(parent.fd, name, &unix.OpenHow{
				Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
			return err
		})
		if err == unix.EXDEV {
			return -1, true, nil
		}
		return fd, false, err
	}
	mask := w.s.statxMask()
	var sx unix.Statx_t
	// Look before opening: opening a mount point reaches the mounted
	// filesystem (a FUSE daemon that stopped answering would block the
	// walk). AT_STATX_DONT_SYNC and only the mount ID asked: nothing is
	// asked of it. The check after the open catches a mount that appears
	// in between.
	err = ignoringEINTR(func() error {
		return unix.Statx(parent.fd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, mask, &sx)
	})
	if err == nil && sx.Mask&uint32(mask) != 0 && (sx.Mnt_id != w.rootMnt || sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0) {
		return -1, true, nil
	}
	fd, err = openat(parent.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return -1, false, err
	}
	err = ignoringEINTR(func() error { return unix.Statx(fd, "", unix.AT_EMPTY_PATH, mask, &sx) })
	if err == nil && sx.Mask&uint32(mask) == 0 {
		err = fmt.Errorf("kernel returned no mount ID: %w", ErrUnsupported)
	}
	if err != nil {
		unix.Close(fd)
		return -1, false, err
	}
	if sx.Mnt_id != w.rootMnt || sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		unix.Close(fd)
		return -1, true, nil
	}
	return fd, false, nil
}

// enter opens subdirectory name of parent and returns its node, or nil
// when there is nothing to descend into (gone, a mount, replaced by a
// non-directory which has then been unlinked, or an error recorded).
func (w *walk) enter(parent *dirNode, name string) *dirNode {
	if testHookBeforeEnter != nil {
		testHookBeforeEnter(parent.child(name))
	}
	fd, crossed, err := w.openDir(parent, name)
	if err == nil && !crossed && testHookAfterEnter != nil {
		testHookAfterEnter(parent.child(name))
	}
	switch {
	case crossed:
		w.foundMount(parent.fd, name, parent.child(name))
		parent.keep(name)
		return nil
	case err == nil:
		return &dirNode{parent: parent, name: name, fd: fd, depth: parent.depth + 1}
	case err == unix.ENOENT:
		return nil
	case err == unix.ENOTDIR || err == unix.ELOOP:
		// It is no longer a directory (a symlink or file was swapped in):
		// unlink the entry itself. unlinkat never follows a symlink.
		if err := unlinkat(parent.fd, name, 0); err != nil && err != unix.ENOENT {
			w.entryFailed(parent, name, "unlinkat", err)
			return nil
		}
		parent.markProgress()
		return nil
	}
	w.fail(&os.PathError{Op: "openat", Path: parent.child(name), Err: err})
	parent.keep(name)
	return nil
}

func (n *dirNode) markKept()     { n.kept.Store(true) }
func (n *dirNode) markProgress() { n.progress.Store(true) }

// keep records that the entry name of n was deliberately left in place (a
// mount, or an entry that could not be removed and was reported).
func (n *dirNode) keep(name string) {
	n.kept.Store(true)
	n.keptMu.Lock()
	if n.keptNames == nil {
		n.keptNames = make(map[string]struct{})
	}
	n.keptNames[name] = struct{}{}
	n.keptMu.Unlock()
}

// entryFailed records a failure to remove an entry of n. EBUSY from unlink
// or rmdir means the entry is a mount point: reported as a mount.
func (w *walk) entryFailed(n *dirNode, name, op string, err error) {
	n.keep(name)
	if err == unix.EBUSY {
		w.foundMount(n.fd, name, n.child(name))
		return
	}
	w.fail(&os.PathError{Op: op, Path: n.child(name), Err: err})
}

// scratch is one goroutine's reusable memory for listing directories.
type scratch struct {
	buf   []byte   // getdents64 records
	files []dirent // the batch's non-directories, to unlink in inode order
}

// scratchPool keeps listing buffers between calls: a teardown of a small
// volume should not allocate a megabyte each time.
var scratchPool = sync.Pool{New: func() any { return &scratch{buf: make([]byte, direntBufSize)} }}

// list reads one batch of n's entries: non-directories are unlinked at
// once, in inode order (as GNU rm does for large directories: on ext4 and
// XFS it keeps inode-table updates local), subdirectories are passed to
// subdir. It returns false at the end of the directory.
func (w *walk) list(n *dirNode, sc *scratch, subdir func(name []byte)) bool {
	var nread int
	err := ignoringEINTR(func() (err error) {
		nread, err = unix.Getdents(n.fd, sc.buf)
		return err
	})
	if err != nil {
		w.fail(&os.PathError{Op: "getdents64", Path: n.path(), Err: err})
		n.markKept()
		return false
	}
	if nread == 0 {
		return false
	}
	buf := sc.buf[:nread]
	files := sc.files[:0]
	var skip map[string]struct{}
	if n.reopened {
		skip = n.keptNames // already met and reported in this walk
	}
	for off := 0; off < nread; {
		d, next, err := nextDirent(buf, off)
		if err != nil {
			w.fail(&os.PathError{Op: "getdents64", Path: n.path(), Err: err})
			n.markKept()
			return false
		}
		off = next
		switch {
		case isDotOrDotDot(d.name):
		case skip != nil && isKept(skip, d.name):
		case d.typ == unix.DT_DIR:
			subdir(d.name)
		default:
			files = append(files, d)
		}
	}
	slices.SortFunc(files, func(a, b dirent) int { return cmp.Compare(a.ino, b.ino) })
	removed := false
	for _, d := range files {
		// DT_UNKNOWN and every other type: try unlink; EISDIR says it is a
		// directory after all.
		switch err := unlinkatPtr(n.fd, d.cstr(buf), 0); err {
		case nil:
			removed = true
			if w.hook != nil {
				w.hook(testhook.RemoveAllRemoved, n.path()+"/"+string(d.name))
			}
		case unix.ENOENT:
		case unix.EISDIR:
			subdir(d.name)
		default:
			w.entryFailed(n, string(d.name), "unlinkat", err)
		}
	}
	sc.files = files[:0]
	if removed {
		n.markProgress()
	}
	return true
}

func isKept(names map[string]struct{}, name []byte) bool {
	_, ok := names[string(name)]
	return ok
}

// finish tries to remove the emptied directory n from its parent. It
// returns true when n should be listed again (its rmdir found entries a
// pass missed) instead of being closed.
func (w *walk) finish(n *dirNode) (again bool) {
	p := n.parent
	err := unlinkat(p.fd, n.name, unix.AT_REMOVEDIR)
	kept, progress := n.kept.Load(), n.progress.Load()
	switch err {
	case nil, unix.ENOENT:
		p.markProgress()
		if err == nil && w.hook != nil {
			w.hook(testhook.RemoveAllRemoved, n.path())
		}
		return false
	case unix.ENOTEMPTY, unix.EEXIST:
		if !kept && progress && n.passes < maxPasses {
			if _, err := unix.Seek(n.fd, 0, 0); err == nil {
				n.passes++
				n.progress.Store(false)
				n.eof = false
				n.subdirs, n.next = n.subdirs[:0], 0
				return true
			}
		}
		p.keep(n.name)
		if !kept {
			w.fail(&os.PathError{Op: "unlinkat", Path: n.path(), Err: err})
		}
		return false
	case unix.ENOTDIR:
		// The directory was moved away after we opened it and a
		// non-directory took its name: remove that entry (never followed).
		if err := unlinkat(p.fd, n.name, 0); err != nil && err != unix.ENOENT {
			w.entryFailed(p, n.name, "unlinkat", err)
		}
		return false
	}
	w.entryFailed(p, n.name, "unlinkat", err)
	return false
}

// serial removes the tree under root depth-first with an explicit stack.
// At most w.maxOpen directory fds are open; the fds of shallower frames
// are closed and reopened through ".." on the way back up.
func (w *walk) serial(root *dirNode, sc *scratch) {
	stack := []*dirNode{root}
	defer func() {
		for _, f := range stack {
			if f.fd >= 0 {
				unix.Close(f.fd)
			}
		}
	}()
	base := root.depth
	for len(stack) > 0 {
		if w.aborted.Load() {
			return
		}
		f := stack[len(stack)-1]
		if f.next < len(f.subdirs) {
			name := f.subdirs[f.next]
			f.next++
			if c := w.enter(f, name); c != nil {
				stack = append(stack, c)
				if len(stack) > w.maxOpen {
					w.evict(stack[len(stack)-w.maxOpen-1])
				}
			}
			continue
		}
		if !f.eof {
			f.subdirs, f.next = f.subdirs[:0], 0
			if !w.list(f, sc, func(name []byte) { f.subdirs = append(f.subdirs, string(name)) }) {
				f.eof = true
			}
			continue
		}
		// f is listed and its subdirectories are gone: remove f.
		if f.depth > base && f.parent.fd < 0 {
			if err := w.reopenParent(f); err != nil {
				w.abort(err)
				return
			}
		}
		if w.finish(f) {
			continue
		}
		unix.Close(f.fd)
		f.fd = -1
		stack = stack[:len(stack)-1]
	}
}

// evict closes a frame's fd, remembering its identity for reopenParent.
func (w *walk) evict(f *dirNode) {
	if f.fd < 0 || f.parent == nil || f.parent.parent == nil {
		return // never the start directory
	}
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return // keep it open rather than lose the ability to verify it
	}
	f.dev, f.ino = uint64(st.Dev), uint64(st.Ino)
	unix.Close(f.fd)
	f.fd = -1
}

// reopenParent reopens the evicted parent of f through f's "..", and
// proves it is the same directory by device and inode: if the tree was
// moved meanwhile, the walk stops instead of removing from somewhere else.
//
// Like any lookup, ".." steps onto whatever is mounted on the parent now,
// so it is opened with the same mount check as a descent (EXDEV, or another
// mount ID): a mount that appeared on an evicted directory is reported and
// never entered. The covered directory is then out of reach; the walk stops.
func (w *walk) reopenParent(f *dirNode) error {
	p := f.parent
	fd, crossed, err := w.openDir(f, "..")
	if crossed {
		w.foundMount(f.fd, "..", p.path())
		return &os.PathError{Op: "openat", Path: p.path(), Err: errors.New("a mount appeared on this directory during removal; stopping")}
	}
	if err != nil {
		return &os.PathError{Op: "openat", Path: p.path(), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "fstat", Path: p.path(), Err: err}
	}
	if uint64(st.Dev) != p.dev || uint64(st.Ino) != p.ino {
		unix.Close(fd)
		return &os.PathError{Op: "openat", Path: p.path(), Err: errors.New("directory was moved during removal; stopping")}
	}
	p.fd = fd
	p.reopened = true
	return nil
}

// String is used in test failure messages.
func (n *dirNode) String() string { return strings.TrimPrefix(n.path(), "/") }
