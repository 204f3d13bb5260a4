package mountdetect

// MountTable is one read of the mount table, kept to answer many questions
// without reading it again: `nodevol scan` examines thousands of volume
// directories with a single read of /proc/self/mountinfo (which costs
// milliseconds on a node with thousands of mounts). Its answers are as old
// as the read; RemoveAll never uses a table, it reads the kernel's at the
// time it runs.
type MountTable struct {
	mountTableData
}

// ReadMountTable reads the mount table once.
func ReadMountTable() (*MountTable, error) { return readMountTable() }

// NestedMounts is NestedMounts answered from the table (mounts made
// through another bind mount of path's filesystem included).
func (t *MountTable) NestedMounts(path string) ([]Mount, error) { return t.nestedMounts(path) }

// Detect is Detect with the hugetlbfs page size taken from the table.
func (t *MountTable) Detect(path string) (FSInfo, error) { return detect(path, t) }
