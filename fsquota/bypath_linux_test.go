package fsquota

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// byPath drives a Manager by paths, as most tests do: each call opens the
// directory (a final symlink not followed) and hands the descriptor over,
// as a caller holding it would, and Clear hands back the project the last
// Assign of that path returned (none: a Project without an identity, as a
// record from before identities).
type byPath struct {
	*Manager
	assigned map[string]Project
}

func paths(m *Manager) *byPath { return &byPath{Manager: m, assigned: map[string]Project{}} }

// withDir opens path and calls fn with its descriptor, -1 when it does
// not exist.
func withDir[T any](path string, fn func(fd int) (T, error)) (T, error) {
	fd, err := openNoFollow(path, unix.O_DIRECTORY)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fn(-1)
	case err != nil:
		var zero T
		return zero, err
	}
	defer unix.Close(fd)
	return fn(fd)
}

func (b *byPath) Assign(path string, limitBytes int64) (uint32, error) {
	p, err := withDir(path, func(fd int) (Project, error) { return b.Manager.Assign(fd, path, limitBytes) })
	if err == nil {
		b.assigned[path] = p
	}
	return p.ID, err
}

func (b *byPath) Clear(path string) error {
	_, err := withDir(path, func(fd int) (struct{}, error) {
		if fd < 0 {
			return struct{}{}, b.Manager.Release(-1, path)
		}
		return struct{}{}, b.Manager.Clear(fd, path, b.assigned[path])
	})
	return err
}

func (b *byPath) Usage(path string) (bytes, inodes int64, err error) {
	u, err := b.ProjectUsage(path)
	return u.Bytes, u.Inodes, err
}

func (b *byPath) ProjectUsage(path string) (Usage, error) {
	return withDir(path, func(fd int) (Usage, error) {
		if fd < 0 {
			return Usage{}, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		return b.Manager.Usage(fd, path)
	})
}
