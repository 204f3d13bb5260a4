//go:build !linux

package fsat

import "io/fs"

// Dir is an open directory (Linux only).
type Dir struct{}

// Option changes how OpenDir and MkdirAll treat the components they open.
type Option int

// SameMount: see the Linux documentation.
const SameMount Option = 1

// OpenRoot returns ErrUnsupported.
func OpenRoot(path string) (*Dir, error) { return nil, ErrUnsupported }

// Close is a no-op.
func (d *Dir) Close() error { return nil }

// Path returns "".
func (d *Dir) Path() string { return "" }

// OpenDir returns ErrUnsupported.
func (d *Dir) OpenDir(rel string, opts ...Option) (*Dir, error) { return nil, ErrUnsupported }

// MkdirAll returns ErrUnsupported.
func (d *Dir) MkdirAll(rel string, mode uint32, opts ...Option) (*Dir, error) {
	return nil, ErrUnsupported
}

// ReadFile returns ErrUnsupported.
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) { return nil, ErrUnsupported }

// Entry is a directory entry: its name and its type.
type Entry struct {
	Name string
	Type fs.FileMode
}

// ReadEntries returns ErrUnsupported.
func (d *Dir) ReadEntries() ([]Entry, error) { return nil, ErrUnsupported }

// Join returns name.
func (d *Dir) Join(name string) string { return name }

// EachEntry returns ErrUnsupported.
func (d *Dir) EachEntry(fn func(Entry) error) error { return ErrUnsupported }

// Fd returns -1.
func (d *Dir) Fd() int { return -1 }

// Rmdir returns ErrUnsupported.
func (d *Dir) Rmdir(name string) error { return ErrUnsupported }

// StatMount returns ErrUnsupported.
func StatMount(dirfd int, name string, q MountQuery) (MountStat, error) {
	return MountStat{}, ErrUnsupported
}

// StatmountOf returns ErrUnsupported.
func StatmountOf(id uint64) (Statmount, error) { return Statmount{}, ErrUnsupported }

// ListMounts returns ErrUnsupported.
func ListMounts() ([]uint64, error) { return nil, ErrUnsupported }
