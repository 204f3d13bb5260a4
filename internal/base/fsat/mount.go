package fsat

// MountStat is what StatMount learns about a file and the mount it is on.
type MountStat struct {
	// ID is the mount's classic ID (STATX_MNT_ID, Linux 5.8), the one
	// /proc/self/mountinfo lists, which the kernel reuses once the mount
	// is gone. 0 when only MountKey was asked for and the kernel gave
	// the unique ID.
	ID uint64
	// UniqueID is the mount's never-reused ID (STATX_MNT_ID_UNIQUE, Linux
	// 6.8); 0 when no ID was asked for or the kernel has none.
	UniqueID uint64
	// Root reports whether the file is the root of its mount: something
	// is mounted on it (false when the kernel cannot say, before 5.8).
	Root bool
	// Dev is the device of the file's filesystem (st_dev), Ino its inode
	// number, Mode its type (the S_IFMT bits of st_mode), Size its size
	// in bytes (st_size; for a FUSE file the size the kernel has cached).
	Dev, Ino, Size uint64
	Mode           uint32
	// Nlink and Blocks (of 512 bytes) are filled in when Usage is asked.
	Nlink  uint32
	Blocks uint64
}

// SameMount reports whether s and o say the same of the mount their files
// are on: the same IDs and device, and both or neither its root.
func (s MountStat) SameMount(o MountStat) bool {
	return s.ID == o.ID && s.UniqueID == o.UniqueID && s.Dev == o.Dev && s.Root == o.Root
}

// Key is the ID two files' mounts are compared by: the unique ID where the
// kernel gave one, else the classic ID.
func (s MountStat) Key() uint64 {
	if s.UniqueID != 0 {
		return s.UniqueID
	}
	return s.ID
}

// MountQuery says what StatMount asks for besides the device, inode
// number, type, size and mount-root attribute, which it always gives.
type MountQuery uint8

const (
	// MountKey asks for the ID to compare mounts by (MountStat.Key): the
	// unique ID where the kernel has one, else the classic ID.
	MountKey MountQuery = 1 << iota
	// TableID asks for the classic ID, by which the mount table lists
	// the mount.
	TableID
	// Usage asks for the link count and the blocks allocated too (a
	// disk-usage walk).
	Usage
)

// Statmount is what StatmountOf learns about a mount.
type Statmount struct {
	// UniqueID and ID are the mount's never-reused and classic IDs (see
	// MountStat).
	UniqueID, ID uint64
	// Propagation holds the mount's MS_SHARED, MS_SLAVE, MS_PRIVATE and
	// MS_UNBINDABLE bits; PeerGroup is its peer group when shared, Master
	// the group it is a slave of when a slave.
	Propagation       uint64
	PeerGroup, Master uint64
	// MountPoint is where it is mounted, as this namespace sees it.
	MountPoint string
}
