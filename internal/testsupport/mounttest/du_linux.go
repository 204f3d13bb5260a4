package mounttest

import (
	"io/fs"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// LstatUsage is what du counts of the tree at dir, computed with lstat
// alone: the bytes the blocks of its inodes take (st_blocks) and the
// number of inodes, dir's own included and each hard-linked inode once.
// Tests hold what they test to it: it shares no code with them.
func LstatUsage(t testing.TB, dir string) (bytes, inodes int64) {
	t.Helper()
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if !seen[st.Ino] {
			seen[st.Ino] = true
			bytes += st.Blocks * 512
			inodes++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, inodes
}
