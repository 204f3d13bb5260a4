package mountdetect

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

type inodeKey struct {
	major, minor uint32
	ino          uint64
}

// usageFrame is one directory of the walk. It holds its own name and its
// parent, not its whole path: a chain of deep directories with long names
// costs memory linear in the names, and a path is built only for a
// message.
type usageFrame struct {
	fd     int
	parent *usageFrame
	name   string // the path given, for the root
	subs   []string
	next   int
}

func (f *usageFrame) path() string {
	if f.parent == nil {
		return f.name
	}
	return f.parent.path() + "/" + f.name
}

func diskUsage(path string, s strategy) (Usage, error) {
	var u Usage
	if !s.walkSafe() {
		return u, fmt.Errorf("disk usage of %s: %w: the kernel offers neither statx mount IDs nor openat2", path, ErrUnsupported)
	}
	fd, err := openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return u, &os.PathError{Op: "open", Path: path, Err: err}
	}
	mask := unix.STATX_TYPE | unix.STATX_INO | unix.STATX_NLINK | unix.STATX_BLOCKS | s.statxMask()
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, mask, &sx); err != nil {
		unix.Close(fd)
		return u, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	rootMnt := sx.Mnt_id
	seen := map[inodeKey]bool{}
	count := func(sx *unix.Statx_t) {
		if sx.Nlink > 1 && sx.Mode&unix.S_IFMT != unix.S_IFDIR {
			k := inodeKey{sx.Dev_major, sx.Dev_minor, sx.Ino}
			if seen[k] {
				return
			}
			seen[k] = true
		}
		u.Inodes++
		u.Bytes += int64(sx.Blocks) * 512
	}
	count(&sx)

	w := &walk{s: s, rootMnt: rootMnt}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	stack := []*usageFrame{{fd: fd, name: path}}
	defer func() {
		for _, f := range stack {
			unix.Close(f.fd)
		}
	}()
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.next < len(f.subs) {
			name := f.subs[f.next]
			f.next++
			cfd, crossed, err := w.openDir(&dirNode{fd: f.fd}, name)
			switch {
			case crossed:
				u.Skipped = append(u.Skipped, Mount{MountPoint: f.path() + "/" + name})
				continue
			case err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP:
				continue // gone or replaced during the walk
			case err != nil:
				return u, &os.PathError{Op: "openat", Path: f.path() + "/" + name, Err: err}
			}
			if err := unix.Statx(cfd, "", unix.AT_EMPTY_PATH, mask, &sx); err != nil {
				unix.Close(cfd)
				return u, &os.PathError{Op: "statx", Path: f.path() + "/" + name, Err: err}
			}
			count(&sx)
			stack = append(stack, &usageFrame{fd: cfd, parent: f, name: name})
			continue
		}
		var n int
		err := ignoringEINTR(func() (err error) { n, err = unix.Getdents(f.fd, sc.buf); return err })
		if err != nil {
			return u, &os.PathError{Op: "getdents64", Path: f.path(), Err: err}
		}
		if n == 0 {
			unix.Close(f.fd)
			stack = stack[:len(stack)-1]
			continue
		}
		f.subs, f.next = f.subs[:0], 0
		for off := 0; off < n; {
			d, next, err := nextDirent(sc.buf[:n], off)
			if err != nil {
				return u, &os.PathError{Op: "getdents64", Path: f.path(), Err: err}
			}
			off = next
			switch {
			case isDotOrDotDot(d.name):
			case d.typ == unix.DT_DIR:
				f.subs = append(f.subs, string(d.name))
			default:
				name := string(d.name)
				err := ignoringEINTR(func() error {
					// AT_STATX_DONT_SYNC: no effect on a local filesystem,
					// and a FUSE mounted on a file here is not asked.
					return unix.Statx(f.fd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, mask, &sx)
				})
				switch {
				case err == unix.ENOENT:
				case err != nil:
					return u, &os.PathError{Op: "statx", Path: f.path() + "/" + string(d.name), Err: err}
				case sx.Mode&unix.S_IFMT == unix.S_IFDIR:
					f.subs = append(f.subs, string(d.name)) // DT_UNKNOWN directory
				case sx.Mnt_id != rootMnt && s.statxMask() != 0:
					u.Skipped = append(u.Skipped, Mount{MountPoint: f.path() + "/" + string(d.name)}) // a bind-mounted file
				case sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0:
					u.Skipped = append(u.Skipped, Mount{MountPoint: f.path() + "/" + string(d.name)})
				default:
					count(&sx)
				}
			}
		}
	}
	sortMounts(u.Skipped)
	return u, nil
}
