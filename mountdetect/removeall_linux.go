package mountdetect

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
)

// fail records a failure: RemoveAll reports at most errlist.Max of them
// one by one (those with the smallest paths, whatever the order the
// parallel walk met them in) and counts the rest.
func (w *walk) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs.Add(err)
}

// foundMount records a mount met during the walk, as LookAt sees it
// (nothing is asked of its filesystem: a FUSE daemon that stopped
// answering would block the walk). Its type and source are the mount
// table's, looked up once the walk is over (crossedMounts).
func (w *walk) foundMount(dirfd int, name, path string) {
	e, err := lookAt(dirfd, name, path, LookOnly)
	if err != nil {
		e = Entry{Path: path} // no mount ID: described by its path alone
	}
	w.mu.Lock()
	w.crossed = append(w.crossed, e)
	w.mu.Unlock()
}

// crossedMounts is the mounts the walk met, sorted, with their type and
// source from the mount table by ID: the table read before the walk, and
// for mounts it does not list (made during the walk) one read more, at
// most, for all of them. (A classic ID is reused once its mount is gone:
// a mount unmounted during the walk may be described by its successor's
// type. The description is for people; nothing is decided by it.)
func (w *walk) crossedMounts() []Mount {
	out := make([]Mount, len(w.crossed))
	tab := w.tab
	for i, e := range w.crossed {
		out[i].MountPoint = e.Path
		if e.ID == 0 {
			continue
		}
		m, ok := tab.mountOf(e)
		if !ok && tab == w.tab {
			if t, err := readMountTable(); err == nil {
				tab = t
				m, ok = tab.mountOf(e)
			}
		}
		if ok {
			out[i].FSType, out[i].Source = m.FSType, m.Source
		}
	}
	sortMounts(out)
	return out
}

func (w *walk) abort(err error) {
	w.fail(err)
	w.aborted.Store(true)
}

// result turns what the walk met into RemoveAll's error: nil, the one
// failure itself, or every failure joined (mounts met first, then the
// rest sorted by path, at most errlist.Max of them and a *MoreErrorsError
// counting the others).
func (w *walk) result(path string) error {
	var errs []error
	if len(w.crossed) > 0 {
		errs = append(errs, &CrossesMountError{Path: path, Mounts: w.crossedMounts(), DuringWalk: true})
	}
	kept, more := w.errs.Errors()
	errs = append(errs, kept...)
	if more > 0 {
		errs = append(errs, &MoreErrorsError{N: more})
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
	return fsat.Retry(func() error { return unix.Unlinkat(dirfd, name, flags) })
}

func removeAll(path string, c *config) error {
	dir, base, err := validateRemovePath(path)
	if err != nil {
		return err
	}
	if err := c.walkSafe(path); err != nil {
		return err
	}
	pfd, err := fsat.Openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
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
	// statx, not fstatat: a FUSE filesystem mounted on base whose daemon
	// never answers is not asked (AT_STATX_DONT_SYNC).
	st, err := fsat.StatAt(pfd, base, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &os.PathError{Op: "statx", Path: shown, Err: err}
	}
	w := &walk{act: remove{}, s: c.strategy, maxOpen: c.maxOpen, hook: c.hook}
	if w.maxOpen <= 0 {
		w.maxOpen = defaultMaxOpen
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		// The link itself is removed; its target is not touched.
		return removeEntry(pfd, base, shown)
	default:
		return w.removeFile(pfd, base, shown, path, &st)
	}

	// The start directory is opened O_PATH, which asks its filesystem
	// nothing: opened for reading by name, a mount made on the name since
	// the fstatat (a FUSE daemon that never answers) would be reached and
	// could block the open for good. refuseMounts checks that descriptor,
	// and the directory is then reopened from it (its magic link), never
	// by name again.
	pathFD, err := fsat.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &os.PathError{Op: "openat", Path: shown, Err: err}
	}
	defer unix.Close(pathFD)
	now, err := fsat.StatAt(pathFD, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return &os.PathError{Op: "statx", Path: shown, Err: err}
	}
	if now.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Replaced by a file or symlink since the fstatat: remove that.
		return removeEntry(pfd, base, shown)
	}
	if testHookAfterOpenStart != nil {
		testHookAfterOpenStart(shown)
	}
	if err := w.refuseMounts(pfd, base, pathFD, shown, path, &now); err != nil {
		if err == errStartGone {
			return nil
		}
		return err
	}
	fd, err := fsat.Reopen(pathFD, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		if err == unix.EACCES {
			return w.removeDenied(pfd, base, shown, path)
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

	var sfs unix.Statfs_t
	// The start directory is on the walk's own mount (refuseMounts), so
	// asking its filesystem asks nothing foreign.
	if fsat.Retry(func() error { return unix.Fstatfs(fd, &sfs) }) == nil {
		w.inodeOrder = sfs.Type != unix.TMPFS_MAGIC
		w.growBatches = sfs.Type == unix.EXT4_SUPER_MAGIC
	} else {
		w.inodeOrder = true
	}
	closeRoot = false // the walk owns fd now
	if c.workers > 1 {
		w.parallel(root, c.workers)
	} else {
		sc := getScratch()
		w.serial(root, sc)
		putScratch(sc)
	}
	return w.result(path)
}

// removeDenied removes the start directory (the entry base of pfd) that
// the caller may not list, as os.RemoveAll does, when it is empty: it has
// passed the same refusal as a listable start directory (not a mount
// root, nothing mounted beneath, checked through its O_PATH descriptor,
// which needs no permission on it), and rmdir removes it only if empty
// (and refuses a mount point with EBUSY). Not empty: the *os.PathError of
// the open, EACCES.
func (w *walk) removeDenied(pfd int, base, shown, path string) error {
	denied := &os.PathError{Op: "openat", Path: shown, Err: unix.EACCES}
	switch err := unlinkat(pfd, base, unix.AT_REMOVEDIR); err {
	case nil:
		if w.hook != nil {
			w.hook(testhook.RemoveAllRemoved, shown)
		}
		return nil
	case unix.ENOENT:
		return nil
	case unix.ENOTEMPTY, unix.EEXIST:
		return denied
	case unix.EBUSY:
		w.foundMount(pfd, base, shown)
		return &CrossesMountError{Path: path, Mounts: w.crossedMounts()}
	case unix.ENOTDIR:
		return removeEntry(pfd, base, shown)
	default:
		return &os.PathError{Op: "unlinkat", Path: shown, Err: err}
	}
}

// removeFile removes the start entry base of pfd, a non-directory whose
// fstatat is st, unless it is a mount point.
func (w *walk) removeFile(pfd int, base, shown, path string, st *unix.Stat_t) error {
	mounted, sure, err := childIsMountRoot(pfd, base, shown, st, w.s)
	if err != nil {
		return err
	}
	if mounted || !sure {
		w.foundMount(pfd, base, shown)
		return &CrossesMountError{Path: path, Mounts: w.crossedMounts()}
	}
	if err := removeEntry(pfd, base, shown); err != nil {
		if errors.Is(err, unix.EBUSY) {
			w.foundMount(pfd, base, shown)
			return &CrossesMountError{Path: path, Mounts: w.crossedMounts()}
		}
		return err
	}
	return nil
}

// errStartGone is refuseMounts' answer when the start entry's name no
// longer exists (removed or moved away since it was opened): RemoveAll
// has nothing left to do, as when the path was missing from the start.
var errStartGone = errors.New("start directory gone")

// refuseMounts refuses before touching: the start directory (the entry
// base of pfd, open as fd, its fstatat st) must not be a mount root, and
// nothing may be mounted beneath it. It sets w.rootMnt.
func (w *walk) refuseMounts(pfd int, base string, fd int, shown, path string, st *unix.Stat_t) error {
	selfMounted := false
	if q := w.s.mountQuery(); q != 0 {
		s, err := statMount(fd, "", q)
		if err != nil {
			return &os.PathError{Op: "statx", Path: shown, Err: err}
		}
		w.rootMnt = s.Key()
		selfMounted = s.Root
	} else {
		mounted, _, err := childIsMountRoot(pfd, base, shown, st, w.s)
		if errors.Is(err, unix.ENOENT) {
			// Removed (by another RemoveAll, say) or moved away since it
			// was opened: nothing is at path any more.
			return errStartGone
		}
		if err != nil {
			return err
		}
		selfMounted = mounted
	}
	at, beneath, real, tab, err := mountsAtAndBeneath(fd, shown)
	if err != nil {
		return fmt.Errorf("remove %s: list mounts: %w", path, err)
	}
	w.tab = tab
	// Name the mounts as the caller names the tree, as mounts met during
	// the walk are named.
	renameWithin(at, real, shown)
	renameWithin(beneath, real, shown)
	if selfMounted && len(at) == 0 {
		w.foundMount(pfd, base, shown)
		at = w.crossedMounts()
	}
	if len(at) > 0 || len(beneath) > 0 {
		return &CrossesMountError{Path: path, Mounts: append(at, beneath...)}
	}
	return nil
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

// remove is RemoveAll's action: every entry on the walk's mount is
// unlinked, every directory removed once emptied; what cannot be removed
// is reported and kept, and the walk goes on.
type remove struct{}

func (remove) entered(*walk, *dirNode) bool { return true }

// files unlinks a batch of n's non-directories in inode order (as GNU rm
// does for large directories: on ext4 and XFS it keeps inode-table updates
// local), or on tmpfs in the order listed.
func (remove) files(w *walk, n *dirNode, sc *scratch, files []fileEnt, subdir func(name []byte)) {
	if w.inodeOrder {
		slices.SortFunc(files, func(a, b fileEnt) int { return cmp.Compare(a.ino, b.ino) })
	}
	removed := false
	buf := sc.buf
	for _, d := range files {
		sc.pace()
		// DT_UNKNOWN and every other type: try unlink; EISDIR says it is a
		// directory after all.
		switch err := unlinkatPtr(n.fd, d.cstr(buf), 0); err {
		case nil:
			removed = true
			if w.hook != nil {
				w.hook(testhook.RemoveAllRemoved, n.path()+"/"+string(d.name(buf)))
			}
		case unix.ENOENT:
		case unix.EISDIR:
			subdir(d.name(buf))
		default:
			w.entryFailed(n, string(d.name(buf)), "unlinkat", err)
		}
	}
	if removed {
		n.markProgress()
	}
}

func (remove) mount(w *walk, n *dirNode, name string) {
	w.foundMount(n.fd, name, n.child(name))
	n.keep(name)
}

// replaced: the entry is no longer a directory (a symlink or file was
// swapped in): unlink the entry itself. unlinkat never follows a symlink.
func (remove) replaced(w *walk, n *dirNode, name string) {
	if err := unlinkat(n.fd, name, 0); err != nil && err != unix.ENOENT {
		w.entryFailed(n, name, "unlinkat", err)
		return
	}
	n.markProgress()
}

// denied: a subdirectory the caller may not list (mode 000 or 0300, say)
// can still be removed when it is empty, as os.RemoveAll does: it is
// opened O_PATH (which needs no permission on it) with the same mount
// checks as a descent, and removed with rmdir, which removes nothing but
// an empty directory and refuses a mount point (EBUSY). Not empty: err,
// the EACCES that kept the walk out.
func (remove) denied(w *walk, n *dirNode, name string, err error) {
	fd, crossed, oerr := w.openDirMode(n, name, unix.O_PATH)
	switch {
	case crossed:
		w.act.mount(w, n, name)
		return
	case oerr == unix.ENOENT:
		return
	case oerr == unix.ENOTDIR || oerr == unix.ELOOP:
		w.act.replaced(w, n, name)
		return
	case oerr != nil:
		w.act.failed(w, n, name, &os.PathError{Op: "openat", Path: n.child(name), Err: oerr})
		return
	}
	unix.Close(fd)
	switch rerr := unlinkat(n.fd, name, unix.AT_REMOVEDIR); rerr {
	case nil:
		n.markProgress()
		if w.hook != nil {
			w.hook(testhook.RemoveAllRemoved, n.child(name))
		}
	case unix.ENOENT:
		n.markProgress()
	case unix.ENOTEMPTY, unix.EEXIST:
		w.act.failed(w, n, name, err)
	case unix.ENOTDIR:
		w.act.replaced(w, n, name)
	default:
		w.entryFailed(n, name, "unlinkat", rerr)
	}
}

func (remove) failed(w *walk, n *dirNode, name string, err error) {
	w.fail(err)
	if name == "" {
		n.markKept()
	} else {
		n.keep(name)
	}
}

func (remove) done(w *walk, n *dirNode) bool { return w.finish(n) }

// reopened: the new fd lists n from its start, where what was already
// removed is gone and what was kept reappears: list skips that.
func (remove) reopened(_ *walk, n *dirNode) error {
	n.reopened = true
	return nil
}

// finish tries to remove the emptied directory n from its parent. It
// returns true when n should be listed again (its rmdir found entries a
// pass missed) instead of being closed.
func (w *walk) finish(n *dirNode) (again bool) {
	p := n.parent
	if n.gone.Load() {
		if w.stillNamed(n) {
			// getdents64 said ENOENT, but n still stands at its name: not
			// removed (a filesystem, a FUSE daemon say, may answer ENOENT
			// for a live directory). Its listing failed; reported, kept.
			p.keep(n.name)
			w.fail(&os.PathError{Op: "getdents64", Path: n.path(), Err: unix.ENOENT})
			return false
		}
		// Removed by someone else: nothing to remove. Its name in p, if
		// taken again, is not n; p is listed again and meets it as it is.
		p.markProgress()
		return false
	}
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

// stillNamed reports whether n, whose listing failed with ENOENT, is
// nonetheless alive and still the entry n.name of its (open) parent: the
// same device and inode, looked at without following a symlink or
// triggering an automount, and without asking the filesystem
// (AT_STATX_DONT_SYNC). A directory really removed has no links left or
// its name shows something else (or nothing).
func (w *walk) stillNamed(n *dirNode) bool {
	self, err := fsat.StatMount(n.fd, "", fsat.Usage)
	if err != nil || self.Nlink == 0 {
		return false
	}
	named, err := fsat.StatMount(n.parent.fd, n.name, 0)
	if err != nil {
		return false
	}
	return named.Dev == self.Dev && named.Ino == self.Ino
}
