package mountdetect

import "github.com/nodevol/nodevol/internal/base/fsat"

// Entry is a directory entry as LookAt found it: what the kernel's VFS
// knows of it, without its filesystem, or one mounted on it, having been
// asked anything.
type Entry struct {
	// Path names the entry in messages; nothing is resolved through it.
	Path string
	// MountStat is the entry's type (Mode: unix.S_IFDIR, unix.S_IFLNK,
	// ...), device and inode, both IDs of the mount it is on (the unique
	// one from Linux 6.8), and whether it is that mount's root (Root:
	// something is mounted on it).
	fsat.MountStat
	// Fd is the entry, opened as LookAt's open said; -1 when nothing was
	// opened. The caller closes it (Close).
	Fd int
}

// Close closes Fd if it is open.
func (e *Entry) Close() { e.close() }

// Open says what LookAt opens.
type Open int

const (
	// LookOnly opens nothing.
	LookOnly Open = iota
	// OpenDir opens a directory to be listed (O_RDONLY|O_DIRECTORY), or
	// O_PATH when it is a mount root, which reaches nothing of the
	// filesystem mounted there. Anything else is not opened.
	OpenDir
	// OpenPath opens the entry O_PATH whatever it is (a symlink itself).
	OpenPath
	// LookTableID is LookOnly asking only the mount ID the mount table
	// lists (Entry.UniqueID is 0): one statx on every kernel, where
	// LookOnly makes two from Linux 6.8 on. For a caller that finds the
	// entry's mount in the table (MountOf, MountsOnRoot) or compares it
	// with a mount it holds open (Child): the classic ID of a mount that
	// is gone can be reused, that of one held open cannot.
	LookTableID
)

// LookAt looks at the entry name of the directory open as dirfd (path
// names it in errors and in Entry.Path) without following a symlink,
// triggering an automount, or asking anything of the filesystem it is on
// or of one mounted on it: statx with AT_STATX_DONT_SYNC, both mount IDs.
// A FUSE daemon that stopped answering is never asked, nor is a hard NFS
// mount whose server is gone. The filesystem type of a mount on it comes
// from the mount table (MountTable.MountOf), never from the mount.
//
// What it opens (see Open) is checked to be what it looked at, by mount
// identity: an entry swapped meanwhile is an error. A missing entry is
// an error matching fs.ErrNotExist. Mount IDs need Linux 5.8: before,
// the error matches ErrUnsupported, and with OpenPath the entry is open
// nonetheless and its type known, for a caller that falls back to Detect
// on the descriptor.
func LookAt(dirfd int, name, path string, open Open) (Entry, error) {
	return lookAt(dirfd, name, path, open)
}

// MountOf returns, from the table, the mount e is on (the one mounted on
// it when e is a mount root), found by e's mount ID: its type and source
// are the table's, and nothing is asked of its filesystem. ok is false
// when the table does not list it (mounted after the table was read). An
// Entry without a mount ID (Linux < 5.8: a device only) stands for any
// mount of its device, which has the same type and source. A nil table:
// the kernel's, read now.
func (t *MountTable) MountOf(e Entry) (m Mount, ok bool, err error) {
	if t, err = t.OrRead(); err != nil {
		return Mount{}, false, err
	}
	m, ok = t.mountOf(e)
	return m, ok, nil
}

// InfoFromTable is what Detect says of e, a mount root, taken from m, its
// mount as the table lists it (MountOf), without asking its filesystem
// anything: a mount point for sure, m's type ("" when m is not in the
// table), and the magic number of the types MediumOf tells apart (tmpfs
// and hugetlbfs; 0 for others).
func (e Entry) InfoFromTable(m Mount) FSInfo {
	info := FSInfo{Path: e.Path, FSType: m.FSType, MountPoint: true, MountPointSure: true}
	switch m.FSType {
	case "tmpfs":
		info.Magic = MagicTmpfs
	case "hugetlbfs":
		info.Magic = MagicHugetlbfs
	}
	return info
}

// MountsOnRoot is MountsAtEntry for an entry that is the root of a mount
// (e.Root: something is mounted on it) and that need not be open: LookAt
// with LookOnly or LookTableID, a statx of its name relative to its
// directory. The directory is found in the table by the mount ID that
// statx read, its mount point being the entry's path as the table names
// it, so nothing holds the mount: a descriptor on the root of a namespace's copy of a
// mount (O_PATH included) makes another namespace's umount2 of the
// original fail with EBUSY while it is open. ok is false, with nothing
// listed, when e is not a mount root, carries no mount ID (Linux < 5.8),
// or its mount is not in the table (mounted since it was read); the
// caller then opens it and asks MountsAtEntry. A nil table: the
// kernel's, read now.
func (t *MountTable) MountsOnRoot(e Entry) (at, beneath []Mount, ok bool, err error) {
	if t, err = t.OrRead(); err != nil {
		return nil, nil, false, err
	}
	at, beneath, ok = t.mountsOnRoot(e)
	return at, beneath, ok, nil
}

// Parent is a directory open as a descriptor, with what its entries that
// are not mount roots share with it read once (MountTable.Parent): its
// mount, its filesystem's type and the kernel's name for it. Each such
// entry is then answered from a statx of its name (LookAt with LookOnly)
// without being opened (MountTable.Child).
type Parent struct {
	// real is the kernel's name of the directory Parent read, rel the
	// path from it of this one (Beneath; "" for that directory): the
	// kernel names this one real+"/"+rel, a string no question needs
	// built.
	real, rel string
	st        fsat.MountStat
	info      FSInfo
	// tab is the table p was read with (nil: none), and in is where in it
	// the mounts at or beneath p's entries can be (Beneath narrows it):
	// each Child then searches there, not the whole table.
	tab *MountTable
	in  window
}

// window is where in a table the mounts at or beneath a directory's
// entries can be (Parent.narrow): entries[lo:hi] by mount point, and
// byDev[dev][plo:phi] by position (phi -1: anywhere in byDev).
type window struct {
	lo, hi   int
	dev      uint64
	plo, phi int
}

// Parent reads, from the directory open as fd (path names it in
// messages), the mount it is on (statx), its filesystem's type (fstatfs:
// fd is not to be a mount whose filesystem might not answer) and the
// kernel's name for it (/proc/self/fd), once for all its entries.
func (t *MountTable) Parent(fd int, path string) (*Parent, error) { return newParent(t, fd, path) }

// Child answers, for e, the entry name of p as LookAt found it without
// opening it (LookOnly or LookTableID), what DetectEntry and
// MountsAtEntry answer of it open. A directory that is not a mount root is on its parent's mount and
// filesystem, and the kernel names it by its parent's name joined with
// name. ok is false when that cannot be used: e is a mount root, not a
// directory, on another mount than p (changed since p was read), carries
// no mount ID (Linux < 5.8), or the filesystem is hugetlbfs; the caller
// then opens it.
//
// The parent's name is the kernel's when Parent read it: a parent renamed
// since then (by anyone who can write where it is) is looked up in the
// table by its former name, as a table read before the rename names every
// mount by its former path anyway.
func (t *MountTable) Child(p *Parent, e Entry, name string) (info FSInfo, at, beneath []Mount, ok bool, err error) {
	if t, err = t.OrRead(); err != nil {
		return FSInfo{Path: e.Path}, nil, nil, false, err
	}
	info, at, beneath, ok = t.child(p, e, name)
	return info, at, beneath, ok, nil
}

// Beneath is the Parent of the directory rel below p's, opened from p's
// descriptor by a path of plain names (no "." or ".."), with no symlink
// followed, no mount crossed and no mount root reached (fsat's SameMount:
// openat2 with RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH|RESOLVE_NO_XDEV; "" is
// p's directory itself): it is
// on p's mount and filesystem, and the kernel named it p's name joined
// with rel when it was opened. Nothing is asked of the kernel. It is
// returned by value, for a caller that examines one directory after
// another to keep in the place of the last.
func (p *Parent) Beneath(rel string) Parent {
	b := *p
	switch {
	case rel == "":
		// The directory itself: a trailing "/" would make every entry's
		// name "dir//name", which no mount point is.
	case p.rel != "":
		b.rel = p.rel + "/" + rel
	default:
		b.rel = rel
	}
	b.st.Root = false
	b.narrow()
	return b
}
