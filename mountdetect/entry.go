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
