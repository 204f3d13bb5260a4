//go:build !linux

package mounttest

import (
	"errors"
	"testing"
)

// LoopImage is not available outside Linux.
func LoopImage(tb testing.TB, fstype string, size int64, mkfsArgs ...string) string {
	tb.Skip("skipping: loop mounts are Linux-only")
	return ""
}

// MountLoop is not available outside Linux.
func MountLoop(tb testing.TB, img, fstype, mountOpts string) (string, error) {
	tb.Skip("skipping: loop mounts are Linux-only")
	return "", errors.ErrUnsupported
}
