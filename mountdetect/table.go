package mountdetect

// MountTable is one read of the mount table, kept to answer many questions
// without reading it again: `nodevol scan` examines thousands of volume
// directories with a single read of /proc/self/mountinfo (which costs
// milliseconds on a node with thousands of mounts). Its answers are as old
// as the read; RemoveAll never uses a table, it reads the kernel's at the
// time it runs.
//
// A nil *MountTable is the kernel's table at the time of each question: its
// methods read the table anew (or, like Detect, need none). Code that may be
// handed a table or nil and asks several questions calls OrRead once, so
// that they are all answered from one read.
type MountTable struct {
	mountTableData
}

// ReadMountTable reads the mount table once.
func ReadMountTable() (*MountTable, error) { return readMountTable() }

// OrRead returns t, or when t is nil the kernel's table read now: the one
// place that decides between a table read once for many questions (nodevol
// scan) and the live table.
func (t *MountTable) OrRead() (*MountTable, error) {
	if t != nil {
		return t, nil
	}
	return readMountTable()
}

// NestedMounts is NestedMounts answered from the table (mounts made
// through another bind mount of path's filesystem included); on a nil
// table, the package's NestedMounts.
func (t *MountTable) NestedMounts(path string) ([]Mount, error) {
	if t == nil {
		return nestedMounts(path)
	}
	return t.nestedMounts(path)
}

// Detect is Detect with the hugetlbfs page size taken from the table.
func (t *MountTable) Detect(path string) (FSInfo, error) { return detect(path, t) }

// SourceMount is a mount found by its source (MountsFromSource).
type SourceMount struct {
	Mount
	// ID is the mount's ID in this mount namespace, as statx's
	// STATX_MNT_ID gives it for a path on the mount.
	ID int
	// Root is the path, within its filesystem, of the directory mounted:
	// "/" for the filesystem's root, another path for a bind mount of a
	// subdirectory.
	Root string
	// Dev is the device (major:minor) of the mount's filesystem, as the
	// table gives it: every mount of one superblock (a tmpfs and the
	// binds of it) has the same.
	Dev uint64
	// HugePageSize is a hugetlbfs mount's pagesize= option in bytes, from
	// the table (0 for other types, or when the table shows none).
	HugePageSize int64
}

// MountsFromSource lists the mounts in the table whose source is source,
// wherever they are: how a mount made with a unique source name (an
// emptyDir's tmpfs) is found after it was moved or its directory renamed,
// and how a bind of it (which keeps the source) is seen. Nil on a nil
// table.
func (t *MountTable) MountsFromSource(source string) []SourceMount {
	if t == nil {
		return nil
	}
	return t.fromSource(source)
}
