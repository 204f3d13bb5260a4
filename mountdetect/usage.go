package mountdetect

// Usage is the space and inodes used by a directory tree on one mount.
type Usage struct {
	// Bytes is the space allocated on disk (st_blocks × 512, as du
	// counts it), each inode counted once however many hard links it has.
	Bytes int64 `json:"bytes"`
	// Inodes counts distinct inodes: files, directories (the start
	// directory included), symlinks and special files.
	Inodes int64 `json:"inodes"`
	// Skipped lists mounts met beneath the directory, which are not
	// counted (their space is not the directory's).
	Skipped []Mount `json:"skipped,omitempty"`
}

// DiskUsage walks the tree at path the way RemoveAll does — fd-relative,
// never following symlinks, never entering another mount — and adds up
// what it finds. Hard-linked files are counted once. Files that vanish
// during the walk are not counted; other errors stop the walk. It keeps one
// directory fd open per level of depth (RemoveAll bounds its fds; this
// read-only walk does not), so a tree deeper than the fd limit fails with
// EMFILE.
func DiskUsage(path string) (Usage, error) { return diskUsage(path, autoStrategy()) }
