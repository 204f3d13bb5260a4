//go:build !linux

package mounttest

import (
	"testing"
)

// Mount is not available outside Linux.
func Mount(t testing.TB, source, target, fstype string, flags uintptr, data string) {
	t.Helper()
	t.Skip("skipping: mounts are Linux-only")
}

// Tmpfs is not available outside Linux.
func Tmpfs(t testing.TB, dir, data string) { Mount(t, "tmpfs", dir, "tmpfs", 0, data) }

// Bind is not available outside Linux.
func Bind(t testing.TB, src, dst string) { Mount(t, src, dst, "", 0, "") }

// Unmount is not available outside Linux.
func Unmount(t testing.TB, target string) { t.Skip("skipping: mounts are Linux-only") }

// LoopFS is not available outside Linux.
func LoopFS(tb testing.TB, fstype string, size int64, mountOpts string, mkfsArgs ...string) string {
	tb.Skip("skipping: loop mounts are Linux-only")
	return ""
}

// ManyMounts is not available outside Linux.
func ManyMounts(tb testing.TB, dir string, n int) { tb.Skip("skipping: mounts are Linux-only") }

// IsMountRoot skips: mounts are Linux-only.
func IsMountRoot(t testing.TB, path string) bool {
	t.Skip("skipping: mounts are Linux-only")
	return false
}
