package fsquota

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// tx is a locked read-modify-write of both bookkeeping files. The lock is
// an exclusive flock on the directory that holds the projects file: the
// files themselves are replaced by rename on every write, so a lock on one
// of them would be a lock on an inode that a waiting process may never
// look at again (and a process opening the new file would not wait).
type tx struct {
	lock         *os.File
	projectsPath string
	projidPath   string
	projects     *projectsFile
	projid       *projidFile
	projectsMode uint32
	projidMode   uint32
}

func (m *Manager) begin() (*tx, error) {
	t := &tx{projectsPath: m.projectsFile, projidPath: m.projidFile, projectsMode: 0o644, projidMode: 0o644}
	lock, err := lockDir(filepath.Dir(m.projectsFile))
	if err != nil {
		return nil, err
	}
	t.lock = lock
	for _, p := range []string{m.projectsFile, m.projidFile} {
		if err := removeStaleTemps(p); err != nil {
			lock.Close()
			return nil, err
		}
	}
	data, mode, err := readRegular(m.projectsFile)
	if err != nil {
		lock.Close()
		return nil, err
	}
	t.projects = parseProjects(string(data))
	if mode != 0 {
		t.projectsMode = mode
	}
	data, mode, err = readRegular(m.projidFile)
	if err != nil {
		lock.Close()
		return nil, err
	}
	t.projid = parseProjid(string(data))
	if mode != 0 {
		t.projidMode = mode
	}
	return t, nil
}

// close releases the lock (closing the directory drops the flock).
func (t *tx) close() { t.lock.Close() }

func (t *tx) writeProjects() error {
	return writeAtomic(t.projectsPath, t.projects.bytes(), t.projectsMode)
}

func (t *tx) writeProjid() error { return writeAtomic(t.projidPath, t.projid.bytes(), t.projidMode) }

// lockDir opens the directory dir and takes an exclusive flock on it,
// waiting for other holders.
func lockDir(dir string) (*os.File, error) {
	fd, err := openNoFollow(dir, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dir)
	if err := fsat.Retry(func() error { return unix.Flock(fd, unix.LOCK_EX) }); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return f, nil
}

// readRegular reads path, refusing symlinks and non-regular files, and
// returns its mode bits (permissions, setuid, setgid, sticky). A missing
// file reads as empty with mode 0.
func readRegular(path string) ([]byte, uint32, error) {
	fd, err := openNoFollow(path, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: ErrUnsafeFile}
	}
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, 0, &os.PathError{Op: "open", Path: path, Err: ErrUnsafeFile}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, 0, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return data, st.Mode & 0o7777, nil
}

// writeAtomic replaces path with data through fsat's durable atomic write
// (temporary file in the same directory, fsync, rename, fsync of the
// directory): readers see the old or the new content, never a mix, and a
// crash leaves one of the two. The directory is trusted (it is /etc) and
// opened once; the entry is checked and replaced relative to it. A symlink
// or non-regular file at path is refused (rename would replace the link
// itself, but its owner meant something else by it). mode is applied
// exactly (permission, setuid, setgid and sticky bits).
func writeAtomic(path string, data []byte, mode uint32) error {
	d, name, err := openParent(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer d.Close()
	st, err := d.Lstat(name)
	switch {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return &os.PathError{Op: "replace", Path: path, Err: ErrUnsafeFile}
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := d.WriteFileAtomic(name, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// openParent opens the trusted directory holding path and returns it with
// path's last element.
func openParent(path string) (*fsat.Dir, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	d, err := fsat.OpenRoot(filepath.Dir(abs))
	if err != nil {
		return nil, "", err
	}
	return d, filepath.Base(abs), nil
}

// removeStaleTemps removes the temporary files an interrupted writeAtomic
// of path left in its directory (a writer killed between creating one and
// renaming it). Only under the lock: then no writer is between the two.
func removeStaleTemps(path string) error {
	d, name, err := openParent(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.EachEntry(func(e fsat.Entry) error {
		if e.Type == 0 && fsat.IsTempOf(e.Name, name) {
			return d.Remove(e.Name)
		}
		return nil
	})
}
