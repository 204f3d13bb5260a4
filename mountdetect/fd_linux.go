package mountdetect

import "fmt"

// DetectFile is Detect for a file already open as fd (any open mode,
// O_PATH included): every answer is about that file, whatever its name
// leads to now. path names it in errors and in FSInfo.Path. The hugetlbfs
// page size comes from the table.
func (t *MountTable) DetectFile(fd int, path string) (FSInfo, error) { return detectFd(fd, path, t) }

// MountsAtFile returns, from the table, the mounts whose mount point is
// the directory open as fd (more than one when mounts are stacked on it;
// the last one is the top) and those beneath it, sorted by mount point.
// The directory is found in the table by the kernel's name for fd
// (/proc/self/fd), not by a path that could have changed. beneath also
// holds mounts made through another bind mount of the directory's
// filesystem onto the directory or an entry beneath it: the table lists
// them under that other path (their MountPoint lies outside the
// directory), but the kernel refuses to remove the entry they sit on.
func (t *MountTable) MountsAtFile(fd int, path string) (at, beneath []Mount, err error) {
	real, err := fdPath(fd, path)
	if err != nil {
		return nil, nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	at, beneath = t.mountsAt(fd, real)
	return at, beneath, nil
}
