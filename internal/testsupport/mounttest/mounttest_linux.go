package mounttest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts and registers an MNT_DETACH unmount in t.Cleanup. target is
// created (as a directory) when missing.
func Mount(t testing.TB, source, target, fstype string, flags uintptr, data string) {
	t.Helper()
	RequireMounts(t)
	if _, err := os.Lstat(target); os.IsNotExist(err) {
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatalf("mkdir %s: %v", target, err)
		}
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		t.Fatalf("mount %s on %s (%s, %q): %v", source, target, fstype, data, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
}

// Tmpfs mounts a fresh tmpfs on dir.
func Tmpfs(t testing.TB, dir, data string) {
	t.Helper()
	Mount(t, "tmpfs", dir, "tmpfs", 0, data)
}

// Bind bind-mounts src (a directory or a file) onto dst, creating dst like
// src's type when missing.
func Bind(t testing.TB, src, dst string) {
	t.Helper()
	RequireMounts(t)
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dst); os.IsNotExist(err) {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if fi.IsDir() {
			err = os.Mkdir(dst, 0o755)
		} else {
			err = os.WriteFile(dst, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	Mount(t, src, dst, "", unix.MS_BIND, "")
}

// Unmount unmounts target now (the cleanup registered by Mount then finds
// nothing to do).
func Unmount(t testing.TB, target string) {
	t.Helper()
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatalf("unmount %s: %v", target, err)
	}
}

// HostAndView is a directory as the host and a DaemonSet's container see
// it: host (dir/host) is a tmpfs made a shared mount, and view
// (dir/container) a bind of it made propagation: unix.MS_SLAVE is a
// hostPath with mountPropagation HostToContainer, unix.MS_PRIVATE one with
// None.
func HostAndView(t testing.TB, dir string, propagation uintptr) (host, view string) {
	t.Helper()
	host = filepath.Join(dir, "host")
	Tmpfs(t, host, "size=4m")
	if err := unix.Mount("", host, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	view = filepath.Join(dir, "container")
	Bind(t, host, view)
	if err := unix.Mount("", view, "", propagation, ""); err != nil {
		t.Fatal(err)
	}
	return host, view
}
