package subpath

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/mountdetect"
)

// testHookAfterMountTable, when set by a test, runs right after Clean has
// read the mount table (to mount something "during the walk").
var testHookAfterMountTable func()

func openDirNoFollow(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// isMountRoot reports whether name in dirfd is a mount root, without
// following a symlink.
func isMountRoot(dirfd int, name string) (bool, uint32, error) {
	var sx unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_NO_AUTOMOUNT
	if name == "" {
		flags |= unix.AT_EMPTY_PATH // about dirfd itself
	}
	if err := unix.Statx(dirfd, name, flags, unix.STATX_TYPE, &sx); err != nil {
		return false, 0, err
	}
	if sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, 0, fmt.Errorf("statx gives no mount-root attribute (Linux < 5.8): %w", mountdetect.ErrUnsupported)
	}
	return sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, uint32(sx.Mode) & unix.S_IFMT, nil
}

// readNames lists a directory fd's entries (not "." and "..").
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd) // the os.File owns (and closes) the duplicate
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	return f.Readdirnames(-1)
}

// openTree opens <dir> (the volume's subpath directory) without following
// a symlink at its last element; ok is false when there is nothing to do.
func openTree(dir string) (parent, fd int, ok bool, err error) {
	parent, err = unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, -1, false, nil
	}
	if err != nil {
		return -1, -1, false, &os.PathError{Op: "open", Path: filepath.Dir(dir), Err: err}
	}
	fd, err = openDirNoFollow(parent, filepath.Base(dir))
	switch err {
	case nil:
		return parent, fd, true, nil
	case unix.ENOENT:
		unix.Close(parent)
		return -1, -1, false, nil
	}
	return parent, -1, false, err
}

func clean(ctx context.Context, dir string) error {
	logger := klog.FromContext(ctx)
	parent, fd, ok, err := openTree(dir)
	if !ok {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			// A symlink or file where the directory belongs: unlink it.
			uerr := unix.Unlinkat(parent, filepath.Base(dir), 0)
			unix.Close(parent)
			if uerr != nil && uerr != unix.ENOENT {
				return &os.PathError{Op: "unlinkat", Path: dir, Err: uerr}
			}
			return nil
		}
		if parent >= 0 {
			unix.Close(parent)
		}
		return err
	}
	defer unix.Close(parent)
	defer unix.Close(fd)

	// Ask the open directory, not the path: what the walk works on is fd.
	if mounted, _, err := isMountRoot(fd, ""); err != nil || mounted {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %w", ErrLeft, &mountdetect.CrossesMountError{Path: dir, Mounts: []mountdetect.Mount{{MountPoint: dir}}})
	}
	// One read of the mount table: mounts that are not at <container>/<index>
	// are foreign and stay, with the directories that hold them.
	nested, err := mountdetect.NestedMounts(dir)
	if err != nil {
		return err
	}
	if testHookAfterMountTable != nil {
		testHookAfterMountTable()
	}
	real := dir
	if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
		real = p
	}
	var foreign []mountdetect.Mount
	holdsForeign := map[string]bool{} // relative paths that contain a foreign mount
	for _, m := range nested {
		rel := strings.TrimPrefix(m.MountPoint, real+"/")
		if strings.Count(rel, "/") != 1 {
			foreign = append(foreign, m)
			parts := strings.Split(rel, "/")
			for i := 1; i <= len(parts); i++ {
				holdsForeign[strings.Join(parts[:i], "/")] = true
			}
		}
	}

	var errs []error
	left := func(err error) { errs = append(errs, err) }
	containers, err := readNames(fd)
	if err != nil {
		return &os.PathError{Op: "readdir", Path: dir, Err: err}
	}
	for _, ctr := range containers {
		cpath := filepath.Join(dir, ctr)
		if holdsForeign[ctr] {
			if mounted, _, _ := isMountRoot(fd, ctr); mounted {
				continue // a foreign mount on the container directory: reported below
			}
		}
		cfd, err := openDirNoFollow(fd, ctr)
		if err == unix.ELOOP || err == unix.ENOTDIR {
			if err := unix.Unlinkat(fd, ctr, 0); err != nil && err != unix.ENOENT {
				left(&os.PathError{Op: "unlinkat", Path: cpath, Err: err})
			}
			continue
		}
		if err != nil {
			left(&os.PathError{Op: "openat", Path: cpath, Err: err})
			continue
		}
		// The mount table was read before the walk: a mount that appeared
		// on the container directory since is not in holdsForeign. Ask the
		// open directory itself, so that nothing on another mount is ever
		// unlinked.
		if mounted, _, err := isMountRoot(cfd, ""); err != nil || mounted {
			unix.Close(cfd)
			if err != nil {
				left(&os.PathError{Op: "statx", Path: cpath, Err: err})
			} else {
				left(&mountdetect.CrossesMountError{Path: dir, Mounts: []mountdetect.Mount{{MountPoint: cpath}}, DuringWalk: true})
			}
			continue
		}
		errs = append(errs, cleanContainer(logger, cfd, cpath, ctr, holdsForeign)...)
		unix.Close(cfd)
		if err := unix.Unlinkat(fd, ctr, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT && err != unix.ENOTEMPTY {
			left(&os.PathError{Op: "rmdir", Path: cpath, Err: err})
		}
	}
	if len(foreign) > 0 {
		errs = append(errs, &mountdetect.CrossesMountError{Path: dir, Mounts: foreign})
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w under %s: %w", ErrLeft, dir, errors.Join(errs...))
	}
	if err := unix.Unlinkat(parent, filepath.Base(dir), unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

func cleanContainer(logger klog.Logger, cfd int, cpath, ctr string, holdsForeign map[string]bool) []error {
	var errs []error
	indexes, err := readNames(cfd)
	if err != nil {
		return []error{&os.PathError{Op: "readdir", Path: cpath, Err: err}}
	}
	for _, idx := range indexes {
		p := filepath.Join(cpath, idx)
		mounted, typ, err := isMountRoot(cfd, idx)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			errs = append(errs, &os.PathError{Op: "statx", Path: p, Err: err})
			continue
		}
		if holdsForeign[ctr+"/"+idx] {
			continue // a foreign mount beneath this entry: leave it (reported by the caller)
		}
		if mounted {
			// Unmount through the directory fd: the path cannot be
			// redirected by a symlink swapped into the tree.
			target := "/proc/self/fd/" + strconv.Itoa(cfd) + "/" + idx
			if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil {
				errs = append(errs, &os.PathError{Op: "umount", Path: p, Err: err})
				continue
			}
			logger.V(2).Info("Unmounted subpath", "path", p)
			if mounted, typ, err = isMountRoot(cfd, idx); err != nil || mounted {
				if err == nil {
					err = errors.New("still a mount point after unmount (stacked mounts)")
				}
				errs = append(errs, &os.PathError{Op: "umount", Path: p, Err: err})
				continue
			}
		}
		op, flags := "unlink", 0
		if typ == unix.S_IFDIR {
			op, flags = "rmdir", unix.AT_REMOVEDIR // rmdir only: a non-empty directory stays
		}
		if err := unix.Unlinkat(cfd, idx, flags); err != nil && err != unix.ENOENT {
			errs = append(errs, &os.PathError{Op: op, Path: p, Err: err})
		}
	}
	return errs
}

func list(dir string) ([]Entry, error) {
	parent, fd, ok, err := openTree(dir)
	if !ok {
		if parent >= 0 {
			unix.Close(parent)
		}
		switch err {
		case nil:
			return nil, nil // nothing there
		case unix.ELOOP, unix.ENOTDIR:
			return nil, nil // a symlink or file where the directory belongs: no entries
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(parent)
	defer unix.Close(fd)
	var out []Entry
	var errs []error
	containers, err := readNames(fd)
	if err != nil {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: err}
	}
	for _, ctr := range containers {
		cpath := filepath.Join(dir, ctr)
		cfd, err := openDirNoFollow(fd, ctr)
		if err == unix.ELOOP || err == unix.ENOTDIR || err == unix.ENOENT {
			continue // not a container directory (Clean unlinks it)
		}
		if err != nil {
			errs = append(errs, &os.PathError{Op: "openat", Path: cpath, Err: err})
			continue
		}
		idxs, err := readNames(cfd)
		if err != nil {
			errs = append(errs, &os.PathError{Op: "readdir", Path: cpath, Err: err})
		}
		for _, idx := range idxs {
			p := filepath.Join(cpath, idx)
			mounted, _, err := isMountRoot(cfd, idx)
			if err == unix.ENOENT {
				continue
			}
			if err != nil {
				// An entry whose mount status is unknown is not reported as
				// "not mounted".
				errs = append(errs, &os.PathError{Op: "statx", Path: p, Err: err})
				continue
			}
			out = append(out, Entry{Container: ctr, Index: idx, Path: p, MountPoint: mounted})
		}
		unix.Close(cfd)
	}
	slices.SortFunc(out, compareEntries)
	return out, errors.Join(errs...)
}

// compareEntries orders by container, then by index as a number when both
// are numbers ("2" before "10").
func compareEntries(a, b Entry) int {
	if c := strings.Compare(a.Container, b.Container); c != 0 {
		return c
	}
	ai, aerr := strconv.Atoi(a.Index)
	bi, berr := strconv.Atoi(b.Index)
	if aerr == nil && berr == nil {
		return cmp.Compare(ai, bi)
	}
	return strings.Compare(a.Index, b.Index)
}
