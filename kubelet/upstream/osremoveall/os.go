// Package os is the package Go's own os RemoveAll tests (removeall_test.go
// and TestRemoveAllRace of os_test.go, Go 1.26.8) run against here, as their
// external test package os_test: it is the standard library's os, except
// that RemoveAll is mountdetect.RemoveAll. hack/upstream adds the test
// files with go test -overlay, their import of "os" rewritten to this
// package; see UPSTREAM for the pinned files and the tests that cannot
// apply or deliberately differ.
//
// Only what the test files use is here, each the standard library's own.
package os

import (
	"io/fs"
	"os"

	"github.com/nodevol/nodevol/mountdetect"
)

// RemoveAll is the one function that is not os's.
func RemoveAll(path string) error { return mountdetect.RemoveAll(path) }

type (
	File      = os.File
	PathError = os.PathError
)

// ErrPermission is os.ErrPermission itself (errors.Is compares it).
var ErrPermission = os.ErrPermission

func Chdir(dir string) error                       { return os.Chdir(dir) }
func Chmod(name string, mode fs.FileMode) error    { return os.Chmod(name, mode) }
func CopyFS(dir string, fsys fs.FS) error          { return os.CopyFS(dir, fsys) }
func Create(name string) (*File, error)            { return os.Create(name) }
func DirFS(dir string) fs.FS                       { return os.DirFS(dir) }
func Executable() (string, error)                  { return os.Executable() }
func Getenv(key string) string                     { return os.Getenv(key) }
func Getuid() int                                  { return os.Getuid() }
func IsNotExist(err error) bool                    { return os.IsNotExist(err) }
func Lstat(name string) (fs.FileInfo, error)       { return os.Lstat(name) }
func Mkdir(name string, perm fs.FileMode) error    { return os.Mkdir(name, perm) }
func MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }
func Open(name string) (*File, error)              { return os.Open(name) }
func Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func WriteFile(name string, data []byte, perm fs.FileMode) error {
	return os.WriteFile(name, data, perm)
}
