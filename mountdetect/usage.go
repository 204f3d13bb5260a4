package mountdetect

// Usage is the space and inodes used by a directory tree on one mount.
type Usage struct {
	// Bytes is the space allocated on disk (st_blocks × 512, as du
	// counts it), each inode counted once however many hard links it has
	// (but see UpperBound).
	Bytes int64 `json:"bytes"`
	// Inodes counts distinct inodes: files, directories (the start
	// directory included), symlinks and special files (but see
	// UpperBound).
	Inodes int64 `json:"inodes"`
	// UpperBound says that Bytes and Inodes may count some inodes more
	// than once: the tree holds more than MaxHardLinkedInodes distinct
	// hard-linked files, and each link of those the walk could not
	// remember was counted in full: an exact count gives at most these
	// numbers.
	UpperBound bool `json:"upperBound,omitempty"`
	// Skipped lists mounts met beneath the directory, which are not
	// counted (their space is not the directory's).
	Skipped []Mount `json:"skipped,omitempty"`
}

// MaxHardLinkedInodes is how many distinct hard-linked files (inodes with
// more than one link) DiskUsage remembers so as to count each once: a
// 1 MiB table at most, whatever the tree holds. Past it, every further
// link of a file not remembered is counted in full, and the Usage is an
// upper bound (Usage.UpperBound).
const MaxHardLinkedInodes = 3 << 15 // 98,304: 3/4 of a table of 2^17 8-byte slots

// DiskUsage walks the tree at path with RemoveAll's walk — fd-relative,
// never following symlinks, never entering another mount, at most 128
// directory fds open however deep the tree — and adds up what it finds.
// Hard-linked files are counted once, up to MaxHardLinkedInodes of them;
// past that the answer over-counts, and says so (Usage.UpperBound), rather
// than take memory in proportion to what the tree's writer made. Files
// that vanish during the walk are not counted; other errors stop the walk.
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
