package mountdetect

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// bothIDs asks fsat.StatMount for the ID to compare mounts by and the one
// the mount table lists.
const bothIDs = fsat.MountKey | fsat.TableID

// errChanged is the error of an entry that LookAt opened and found not to
// be what it looked at.
var errChanged = errors.New("changed while examined")

func lookAt(dirfd int, name, path string, open Open) (Entry, error) {
	e := Entry{Path: path, Fd: -1}
	if open == OpenPath {
		fd, err := fsat.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err != nil {
			return e, &os.PathError{Op: "openat", Path: path, Err: err}
		}
		s, err := statMount(fd, "", bothIDs)
		if errors.Is(err, ErrUnsupported) {
			if t, err2 := fsat.StatMount(fd, "", 0); err2 == nil {
				e.MountStat, e.Fd = t, fd
				return e, &os.PathError{Op: "statx", Path: path, Err: err}
			}
		}
		if err != nil {
			unix.Close(fd)
			return e, &os.PathError{Op: "statx", Path: path, Err: err}
		}
		e.MountStat, e.Fd = s, fd
		return e, nil
	}
	var s fsat.MountStat
	var err error
	if open == LookTableID {
		s, err = statMount(dirfd, name, fsat.TableID)
	} else {
		s, err = statMountByName(dirfd, name)
	}
	if err != nil {
		return e, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	e.MountStat = s
	if open == LookOnly || open == LookTableID || s.Mode != unix.S_IFDIR {
		return e, nil
	}
	// A mount root is opened O_PATH: no open reaches its filesystem (a
	// FUSE daemon would be asked to open it).
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW
	if s.Root {
		flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW
	}
	fd, err := fsat.Openat(dirfd, name, flags, 0)
	switch err {
	case nil:
	case unix.ELOOP, unix.ENOTDIR:
		// Swapped since the statx: a tree that keeps changing is an error.
		return e, &os.PathError{Op: "openat", Path: path, Err: fmt.Errorf("%w (%w)", err, errChanged)}
	default:
		return e, &os.PathError{Op: "openat", Path: path, Err: err}
	}
	now, err := statMount(fd, "", bothIDs)
	if err != nil {
		unix.Close(fd)
		return e, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if !now.SameMount(s) {
		unix.Close(fd)
		return e, &os.PathError{Op: "openat", Path: path, Err: errChanged}
	}
	e.Fd = fd
	return e, nil
}

func (e *Entry) close() {
	if e.Fd >= 0 {
		unix.Close(e.Fd)
		e.Fd = -1
	}
}

// mountOf is MountOf for a table that is there.
func (t *MountTable) mountOf(e Entry) (Mount, bool) {
	if e.ID == 0 {
		for i := range t.entries {
			if t.entries[i].dev == e.Dev {
				return t.entries[i].Mount, true
			}
		}
		return Mount{}, false
	}
	m, ok := t.byMountID(int(e.ID))
	if !ok {
		return Mount{}, false
	}
	return m.Mount, true
}

// mountsOnRoot is MountsOnRoot for a table that is there.
func (t *MountTable) mountsOnRoot(e Entry) (at, beneath []Mount, ok bool) {
	if !e.Root || e.ID == 0 {
		return nil, nil, false
	}
	m, ok := t.byMountID(int(e.ID))
	if !ok {
		return nil, nil, false
	}
	at, beneath = t.mountsAt(-1, pathOf(m.MountPoint), &e.MountStat)
	return at, beneath, true
}

func newParent(t *MountTable, fd int, path string) (*Parent, error) {
	s, err := statMount(fd, "", bothIDs)
	if err != nil {
		return nil, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	info, err := detectFdAs(fd, path, nil, &s)
	if err != nil {
		return nil, err
	}
	real, err := fdPath(fd, path)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	if real == "/" {
		real = ""
	}
	p := &Parent{real: real, st: s, info: info, tab: t}
	if t != nil {
		p.in = window{hi: len(t.entries), phi: -1} // the whole table, narrowed now
		p.narrow()
	}
	return p, nil
}

// narrow sets p.in to the parts of p.tab (nil: nothing) where the mounts
// at or beneath p's entries can be, found within what p.in held: by
// mount point, those beneath p's path; by position in the filesystem of
// p's mount, those beneath p's position.
func (p *Parent) narrow() {
	t := p.tab
	if t == nil {
		return
	}
	dir := p.path().trimSlash()
	p.in.lo, p.in.hi = t.beneath(&dir, p.in.lo, p.in.hi)
	pos, dev, ok := t.positionOf(-1, p.path(), &p.st)
	if !ok {
		p.in.phi = -1 // no position: Child searches by position in full
		return
	}
	ps := t.byDev[dev]
	plo, phi := p.in.positions(dev, len(ps))
	posDir := pos.trimSlash()
	p.in.plo, p.in.phi = placedBeneath(ps, &posDir, plo, phi)
	p.in.dev = dev
}

// path is the kernel's name of p's directory.
func (p *Parent) path() joinedPath {
	if p.rel == "" {
		return pathOf(p.real)
	}
	return pathOf(p.real).join(p.rel)
}

// child is Child for a table that is there.
func (t *MountTable) child(p *Parent, e Entry, name string) (info FSInfo, at, beneath []Mount, ok bool) {
	if e.Root || e.Mode != unix.S_IFDIR || e.ID == 0 || e.ID != p.st.ID || e.UniqueID != 0 && e.UniqueID != p.st.UniqueID || e.Dev != p.st.Dev || p.info.Magic == MagicHugetlbfs {
		return FSInfo{Path: e.Path}, nil, nil, false
	}
	info = p.info
	info.Path, info.MountPoint, info.MountPointSure = e.Path, false, true
	in := &p.in
	if p.tab != t {
		in = nil // read with another table: its indexes are not t's
	}
	at, beneath = t.mountsAtWithin(-1, p.path().join(name), &e.MountStat, in)
	return info, at, beneath, true
}

// statMountByName is statMount of the entry name in dirfd with both IDs.
// From Linux 6.8 that takes two statx calls, each resolving name: the
// second must have seen the same file (device, inode, type, mount root or
// not), or the entry changed between them (errChanged) and the IDs could
// be two files'.
func statMountByName(dirfd int, name string) (fsat.MountStat, error) {
	s, err := statMount(dirfd, name, fsat.MountKey)
	if err != nil || s.ID != 0 {
		return s, err // before 6.8 the key is the classic ID: one call
	}
	t, err := statMount(dirfd, name, fsat.TableID)
	if err != nil {
		return fsat.MountStat{}, err
	}
	if t.Dev != s.Dev || t.Ino != s.Ino || t.Mode != s.Mode || t.Root != s.Root {
		return fsat.MountStat{}, errChanged
	}
	s.ID = t.ID
	return s, nil
}
