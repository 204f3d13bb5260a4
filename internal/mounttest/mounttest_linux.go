package mounttest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// reexecInNamespace runs this test binary again, with the same arguments, in
// a new mount namespace whose mounts are all private (the Go runtime makes
// them so when it unshares CLONE_NEWNS). It returns the child's exit code.
func reexecInNamespace() (int, error) {
	if os.Geteuid() != 0 {
		return 0, errors.New("not root")
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envInNS+"="+nsEnabled)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
	}
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.Exited():
		return exit.ExitCode(), nil
	case errors.As(err, &exit):
		return 1, nil // killed by a signal; its output already said why
	}
	return 0, err
}

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
