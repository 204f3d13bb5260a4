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

// DiskUsage walks the tree at path with RemoveAll's walk — fd-relative,
// never following symlinks, never entering another mount, at most 128
// directory fds open however deep the tree — and adds up what it finds.
// Hard-linked files are counted once. Files that vanish during the walk are
// not counted; other errors stop the walk.
func DiskUsage(path string) (Usage, error) {
	return diskUsage(path, &config{strategy: autoStrategy()})
}

// DiskUsageFile is DiskUsage for the directory open as fd, which it walks
// from a descriptor of its own (the caller's, which may be O_PATH, is
// neither moved nor closed). path only names the directory in errors and
// in Skipped; it is never resolved.
func DiskUsageFile(fd int, path string) (Usage, error) {
	return diskUsageFile(fd, path, &config{strategy: autoStrategy()})
}
