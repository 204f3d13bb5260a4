package fsquota

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
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
	projectsMode os.FileMode
	projidMode   os.FileMode
}

func (m *Manager) begin() (*tx, error) {
	t := &tx{projectsPath: m.projectsFile, projidPath: m.projidFile, projectsMode: 0o644, projidMode: 0o644}
	lock, err := lockDir(filepath.Dir(m.projectsFile))
	if err != nil {
		return nil, err
	}
	t.lock = lock
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
	if err := ignoringEINTR(func() error { return unix.Flock(fd, unix.LOCK_EX) }); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return f, nil
}

// readRegular reads path, refusing symlinks and non-regular files. A
// missing file reads as empty with mode 0.
func readRegular(path string) ([]byte, os.FileMode, error) {
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
	return data, os.FileMode(st.Mode & 0o7777), nil
}

// writeAtomic replaces path with data: a temporary file in the same
// directory is written, synced and renamed over path, then the directory
// is synced. Readers see the old or the new content, never a mix. A
// symlink or non-regular file at path is refused (rename would replace the
// link itself, but its owner meant something else by it).
func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return &os.PathError{Op: "replace", Path: path, Err: ErrUnsafeFile}
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}
