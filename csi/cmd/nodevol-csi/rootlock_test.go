package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
)

// TestSecondProcessOnOneRootIsRefused runs the real binary. A second
// nodevol-csi of the same driver name on the kubelet root of a running one
// exits with status 1 and a message naming the first (its PID, program and
// start time) and its lock, before it makes a socket; once the first is
// gone (SIGKILLed: nothing released the lock but the kernel), a new one
// serves, and stops cleanly on SIGTERM.
func TestSecondProcessOnOneRootIsRefused(t *testing.T) {
	bin := clitest.Build(t, ".")
	root := t.TempDir()
	dir, err := os.MkdirTemp("", "lk") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	command := func(ctx context.Context, sock string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, "--endpoint", filepath.Join(dir, sock), "--registration-dir", "", "--kubelet-root", root,
			"--node-id", "node-1", "--http-address", "", "--state-dir", dir, "--memory-bytes", "0")
	}
	start := func(sock string) *exec.Cmd {
		t.Helper()
		cmd := command(context.Background(), sock)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitFor(t, func() bool { _, err := os.Lstat(filepath.Join(dir, sock)); return err == nil }, "the socket "+sock)
		return cmd
	}

	first := start("first.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := command(ctx, "second.sock").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("a second nodevol-csi on %s: %v; want exit status 1", root, err)
	}
	for _, want := range []string{
		fmt.Sprintf("held by PID %d (nodevol-csi) since ", first.Process.Pid),
		filepath.Join(root, "nodevol-csi-emptydir.nodevol.github.io.lock"),
		"kubelet root " + root,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the second nodevol-csi's output does not contain %q:\n%s", want, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "second.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused nodevol-csi made its socket: %v", err)
	}

	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	third := start("third.sock")
	if err := third.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := third.Wait(); err != nil {
		t.Errorf("nodevol-csi after the first one was killed: %v; want a clean stop", err)
	}
}
