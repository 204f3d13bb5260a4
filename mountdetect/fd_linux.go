package mountdetect

import (
	"errors"
	"fmt"
	"os"

	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/fsat"
)

func init() {
	friend.BindWithin = func(table any, fd int, path string, dirFd int, dirPath string) (bool, error) {
		return table.(*MountTable).bindWithin(fd, path, dirFd, dirPath)
	}
}

// DetectFile is Detect for a file already open as fd (any open mode,
// O_PATH included): every answer is about that file, whatever its name
// leads to now. path names it in errors and in FSInfo.Path. The hugetlbfs
// page size comes from the table.
func (t *MountTable) DetectFile(fd int, path string) (FSInfo, error) { return detectFd(fd, path, t) }

// DetectEntry is DetectFile for the entry LookAt opened (e.Fd): whether
// it is a mount root, and which mount it is on, are what LookAt read from
// that descriptor (the same answers a statx of it would give again); only
// the filesystem's type is asked (fstatfs). Without mount IDs (Linux <
// 5.8) it is DetectFile.
func (t *MountTable) DetectEntry(e Entry) (FSInfo, error) {
	return detectFdAs(e.Fd, e.Path, t, e.known())
}

// MountsAtEntry is MountsAtFile for the directory LookAt opened (e.Fd),
// its mount found in the table by the ID LookAt read from that
// descriptor instead of by another statx.
func (t *MountTable) MountsAtEntry(e Entry) (at, beneath []Mount, err error) {
	return t.mountsAtFile(e.Fd, e.Path, e.known())
}

// known is e's MountStat when it holds mount IDs (Linux 5.8), else nil.
func (e Entry) known() *fsat.MountStat {
	if e.ID == 0 {
		return nil
	}
	return &e.MountStat
}

// MountsAtFile returns, from the table, the mounts whose mount point is
// the directory open as fd (more than one when mounts are stacked on it;
// the last one is the top) and those beneath it, sorted by mount point.
// The directory is found in the table by the kernel's name for fd
// (/proc/self/fd), not by a path that could have changed (a nil table:
// the kernel's, read now). beneath also
// holds mounts made through another bind mount of the directory's
// filesystem onto the directory or an entry beneath it: the table lists
// them under that other path (their MountPoint lies outside the
// directory), but the kernel refuses to remove the entry they sit on.
func (t *MountTable) MountsAtFile(fd int, path string) (at, beneath []Mount, err error) {
	return t.mountsAtFile(fd, path, nil)
}

// mountsAtFile is MountsAtFile; st, when not nil, is fd's mount as statx
// gave it.
func (t *MountTable) mountsAtFile(fd int, path string, st *fsat.MountStat) (at, beneath []Mount, err error) {
	if t, err = t.OrRead(); err != nil {
		return nil, nil, err
	}
	real, err := fdPath(fd, path)
	if err != nil {
		return nil, nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	at, beneath = t.mountsAt(fd, pathOf(real), st)
	return at, beneath, nil
}

// bindWithin reports whether the mount whose root is the file open as fd
// (path names it in errors) shows a part of the directory open as dirFd:
// the same filesystem (device) as the directory's mount, and a mount root
// within that filesystem that is the directory's own position in it or
// lies beneath it. That is what a bind mount of the directory or of
// something inside it looks like — the kubelet's subPath mounts of a
// volume — and what no other filesystem, nor a bind of another directory
// of the same filesystem, looks like. fd must be the root of its mount;
// a mount missing from the table (made after it was read) is an error. A
// nil table: the kernel's, read now.
//
// Only subpath asks this, as friend.BindWithin.
func (t *MountTable) bindWithin(fd int, path string, dirFd int, dirPath string) (bool, error) {
	s, err := statMount(fd, "", fsat.TableID)
	if err != nil {
		return false, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if !s.Root {
		return false, &os.PathError{Op: "statx", Path: path, Err: errors.New("not the root of a mount")}
	}
	if t, err = t.OrRead(); err != nil {
		return false, err
	}
	m, ok := t.byMountID(int(s.ID))
	if !ok {
		return false, fmt.Errorf("%s: mount %d is not in the mount table (mounted since it was read)", path, s.ID)
	}
	realDir, err := fdPath(dirFd, dirPath)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", dirPath, err)
	}
	pos, dev, ok := t.positionOf(dirFd, pathOf(realDir), nil)
	if !ok {
		return false, fmt.Errorf("%s: its mount is not in the mount table", dirPath)
	}
	if m.dev != dev {
		return false, nil
	}
	return pos.holds(m.root), nil
}
