package cli

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
)

// detectAt answers Detect about path and, when kind is kindDir, lists
// the mounts beneath it, both from one descriptor of path (opened O_PATH,
// as Detect opens it): the two answers are about the same file, and a
// scan pays for one path lookup instead of two. The errors are those of
// tab.Detect and tab.NestedMounts, wrapped "detect: " and "list nested
// mounts: "; a path gone since it was looked at fails the open, matching
// fs.ErrNotExist. A nil tab reads the kernel's table for the nested
// mounts, as tab.NestedMounts does.
func detectAt(tab *mountdetect.MountTable, path string, kind entryKind) (mountdetect.FSInfo, []mountdetect.Mount, error) {
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_PATH, 0)
	if err != nil {
		return mountdetect.FSInfo{Path: path}, nil, fmt.Errorf("detect: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	info, err := tab.DetectFile(fd, path)
	if err != nil {
		return info, nil, fmt.Errorf("detect: %w", err)
	}
	if kind != kindDir {
		return info, nil, nil
	}
	_, nested, err := tab.MountsAtFile(fd, path)
	if err != nil {
		return info, nil, fmt.Errorf("list nested mounts: %w", err)
	}
	return info, nested, nil
}
