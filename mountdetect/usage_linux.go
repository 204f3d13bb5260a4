package mountdetect

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/fsat"
)

type inodeKey struct {
	major, minor uint32
	ino          uint64
}

// usage is DiskUsage's action: every directory and non-directory on the
// walk's mount is counted (a hard-linked inode once), mounts are skipped
// and listed, and the first error stops the walk.
type usage struct {
	u    Usage
	mask int // what statx is asked: the counted fields and the mount ID
	seen map[inodeKey]bool
}

func (a *usage) count(sx *unix.Statx_t) {
	if sx.Nlink > 1 && sx.Mode&unix.S_IFMT != unix.S_IFDIR {
		k := inodeKey{sx.Dev_major, sx.Dev_minor, sx.Ino}
		if a.seen[k] {
			return
		}
		a.seen[k] = true
	}
	a.u.Inodes++
	a.u.Bytes += int64(sx.Blocks) * 512
}

func (a *usage) skip(path string) { a.u.Skipped = append(a.u.Skipped, Mount{MountPoint: path}) }

// entered counts a directory the walk opened.
func (a *usage) entered(w *walk, n *dirNode) bool {
	var sx unix.Statx_t
	if err := fsat.Retry(func() error { return unix.Statx(n.fd, "", unix.AT_EMPTY_PATH, a.mask, &sx) }); err != nil {
		w.abort(&os.PathError{Op: "statx", Path: n.path(), Err: err})
		return false
	}
	a.count(&sx)
	return true
}

// files counts a batch of n's non-directories, looked at by name.
func (a *usage) files(w *walk, n *dirNode, sc *scratch, files []fileEnt, subdir func(name []byte)) {
	var sx unix.Statx_t
	for _, d := range files {
		sc.pace()
		name := string(d.name(sc.buf))
		err := fsat.Retry(func() error {
			// AT_STATX_DONT_SYNC: no effect on a local filesystem, and a
			// FUSE mounted on a file here is not asked.
			return unix.Statx(n.fd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, a.mask, &sx)
		})
		switch {
		case err == unix.ENOENT:
		case err != nil:
			w.abort(&os.PathError{Op: "statx", Path: n.child(name), Err: err})
			return
		case sx.Mode&unix.S_IFMT == unix.S_IFDIR:
			subdir(d.name(sc.buf)) // DT_UNKNOWN directory
		case sx.Mnt_id != w.rootMnt && w.s.statxMask() != 0:
			a.skip(n.child(name)) // a bind-mounted file
		case sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0:
			a.skip(n.child(name))
		default:
			a.count(&sx)
		}
	}
}

func (a *usage) mount(_ *walk, n *dirNode, name string) { a.skip(n.child(name)) }

// replaced: gone or replaced during the walk; not counted.
func (*usage) replaced(*walk, *dirNode, string) {}

func (*usage) failed(w *walk, _ *dirNode, _ string, err error) { w.abort(err) }

// denied: a directory that cannot be read cannot be counted.
func (*usage) denied(w *walk, _ *dirNode, _ string, err error) { w.abort(err) }

func (*usage) done(*walk, *dirNode) bool { return false }

// reopened resumes n's listing where the evicted fd had reached: what was
// listed before is not counted twice. (Directory offsets are cookies that
// stay valid across opens of the directory, as NFS export needs.)
func (*usage) reopened(_ *walk, n *dirNode) error {
	if _, err := unix.Seek(n.fd, n.off, io.SeekStart); err != nil {
		return &os.PathError{Op: "lseek", Path: n.path(), Err: err}
	}
	return nil
}

func diskUsage(path string, c *config) (Usage, error) {
	s := c.strategy
	if !s.walkSafe() {
		return Usage{}, fmt.Errorf("disk usage of %s: %w: the kernel offers neither statx mount IDs nor openat2", path, ErrUnsupported)
	}
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return Usage{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return diskUsageOpen(fd, path, s, c)
}

func diskUsageFile(dirFd int, path string, c *config) (Usage, error) {
	s := c.strategy
	if !s.walkSafe() {
		return Usage{}, fmt.Errorf("disk usage of %s: %w: the kernel offers neither statx mount IDs nor openat2", path, ErrUnsupported)
	}
	fd, err := fsat.Reopen(dirFd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return Usage{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return diskUsageOpen(fd, path, s, c)
}

// diskUsageOpen walks the directory open as fd, which it closes.
func diskUsageOpen(fd int, path string, s strategy, c *config) (Usage, error) {
	a := &usage{
		mask: unix.STATX_TYPE | unix.STATX_INO | unix.STATX_NLINK | unix.STATX_BLOCKS | s.statxMask(),
		seen: map[inodeKey]bool{},
	}
	var sx unix.Statx_t
	if err := fsat.Retry(func() error { return unix.Statx(fd, "", unix.AT_EMPTY_PATH, a.mask, &sx) }); err != nil {
		unix.Close(fd)
		return Usage{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	a.count(&sx)

	w := &walk{act: a, s: s, rootMnt: sx.Mnt_id, maxOpen: c.maxOpen}
	if w.maxOpen <= 0 {
		w.maxOpen = defaultMaxOpen
	}
	// The pseudo-node above the start directory is never used: the start
	// directory is never evicted, nor removed from it.
	root := &dirNode{parent: &dirNode{fd: -1, shown: path}, name: path, fd: fd, depth: 1, shown: path}
	sc := getScratch()
	w.serial(root, sc) // closes every fd it holds
	putScratch(sc)
	if len(w.errs) > 0 {
		return a.u, w.errs[0]
	}
	sortMounts(a.u.Skipped)
	return a.u, nil
}
