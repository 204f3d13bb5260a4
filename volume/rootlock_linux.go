package volume

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

func lockRoot(root, owner string, opts LockOptions) (*RootLock, error) {
	dir, err := fsat.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	name := lockFileName(owner)
	path := dir.Join(name)
	// The file is opened again only if it was replaced between the open
	// and the flock (only a privileged process can do that here): a lock
	// on a file no longer at the name would exclude nobody.
	for range 3 {
		f, err := dir.OpenOwnFile(name)
		if err != nil {
			return nil, err
		}
		fd := int(f.Fd())
		err = fsat.Retry(func() error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) })
		if err == unix.EWOULDBLOCK {
			holder, herr := readHolder(f)
			f.Close()
			return nil, &RootLockedError{Root: root, Owner: owner, Path: path, Holder: holder, HolderErr: herr}
		}
		if err != nil {
			f.Close()
			return nil, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		if same, err := stillAt(dir, name, fd); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, err
			}
			continue
		}
		h := LockHolder{Owner: owner, PID: os.Getpid(), Program: opts.Program, Since: opts.Clock.Now()}
		if err := writeHolder(f, h); err != nil {
			f.Close()
			return nil, err
		}
		return &RootLock{f: f, path: path, holder: h}, nil
	}
	return nil, &os.PathError{Op: "flock", Path: path, Err: errors.New("the lock file was replaced while it was being locked, three times")}
}

// stillAt reports whether name in dir is still the file open as fd.
func stillAt(dir *fsat.Dir, name string, fd int) (bool, error) {
	var open, at unix.Stat_t
	if err := unix.Fstat(fd, &open); err != nil {
		return false, &os.PathError{Op: "fstat", Path: dir.Join(name), Err: err}
	}
	err := fsat.Retry(func() error { return unix.Fstatat(dir.Fd(), name, &at, unix.AT_SYMLINK_NOFOLLOW) })
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "fstatat", Path: dir.Join(name), Err: err}
	}
	return open.Dev == at.Dev && open.Ino == at.Ino, nil
}

// writeHolder replaces the lock file's content with h: written over the
// old content first, then cut to length, so that a reader never finds it
// empty.
func writeHolder(f *os.File, h LockHolder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return err
	}
	return nil
}

// readHolder reads what the lock file says of its holder, at most
// lockFileMax bytes of it.
func readHolder(f *os.File) (LockHolder, error) {
	var h LockHolder
	b := make([]byte, lockFileMax+1)
	n, err := f.ReadAt(b, 0)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return h, err
	case n == 0:
		return h, fmt.Errorf("the lock file %s is empty: its holder has not written its name yet", f.Name())
	case n > lockFileMax:
		return h, fmt.Errorf("the lock file %s holds more than %d bytes", f.Name(), lockFileMax)
	}
	if err := json.Unmarshal(b[:n], &h); err != nil {
		return LockHolder{}, fmt.Errorf("the lock file %s does not name its holder: %w", f.Name(), err)
	}
	if h.PID <= 0 {
		return LockHolder{}, fmt.Errorf("the lock file %s names no PID", f.Name())
	}
	return h, nil
}
