package driver

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func waitSocket(t *testing.T, p string) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().Type() == fs.ModeSocket {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no socket at %s", p)
}

// socketDirs makes a directory with a short name for sockets (a socket
// path has at most 107 bytes; t.TempDir's names are long), removed when
// the test ends, and a registration directory in it.
func socketDirs(t *testing.T) (dir, reg string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	reg = filepath.Join(dir, "registry")
	if err := os.Mkdir(reg, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, reg
}

func serveAsync(t *testing.T, d *Driver, opts ServeOptions) (cancel func()) {
	ctx, c := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, opts) }()
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		c()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestReviewServeShutdownRemovesWhatIsThere: Serve's shutdown removes
// whatever is at the socket paths by then (os.Remove, and the listener's
// own unlink on close), not the socket it made:
//   - a file put there meanwhile is removed (the doc says a file at a
//     socket path is never removed);
//   - a second instance of the driver (a DaemonSet rolling update with
//     surge, a restart that overlaps) replaces the sockets with its own,
//     and the first one's shutdown then unlinks the new instance's CSI
//     and registration sockets: the kubelet's plugin watcher deregisters
//     the driver that is still running.
func TestReviewServeShutdownRemovesWhatIsThere(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		d, err := New(Config{NodeID: "n", KubeletRoot: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		sock := filepath.Join(dir, "csi.sock")
		stop := serveAsync(t, d, ServeOptions{Endpoint: sock})
		waitSocket(t, sock)
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, sock); err != nil {
			t.Fatal(err)
		}
		stop()
		if b, err := os.ReadFile(sock); err != nil || string(b) != "keep" {
			t.Errorf("the file put at the socket path was removed at shutdown: %q, %v", b, err)
		}
	})
	t.Run("second-instance", func(t *testing.T) {
		dir, reg := socketDirs(t)
		sock := filepath.Join(dir, "csi.sock")
		opts := ServeOptions{Endpoint: sock, RegistrationDir: reg}
		// On one kubelet root the second instance is refused (its root
		// lock, TestSecondDriverOnOneRootIsRefused); on two roots it
		// serves, on the same sockets.
		d1, _ := New(Config{NodeID: "n", KubeletRoot: t.TempDir()})
		d2, _ := New(Config{NodeID: "n", KubeletRoot: t.TempDir()})
		stop1 := serveAsync(t, d1, opts)
		waitSocket(t, sock)
		regSock := filepath.Join(reg, DefaultName+"-reg.sock")
		waitSocket(t, regSock)
		fi1, _ := os.Lstat(sock)
		serveAsync(t, d2, opts)
		for i := 0; ; i++ { // wait until the second instance replaced it
			fi, err := os.Lstat(sock)
			if err == nil && !os.SameFile(fi, fi1) {
				break
			}
			if i == 500 {
				t.Fatal("the second instance did not replace the socket")
			}
			time.Sleep(10 * time.Millisecond)
		}
		waitSocket(t, regSock)
		stop1()
		for _, p := range []string{sock, regSock} {
			c, err := net.Dial("unix", p)
			if err != nil {
				t.Errorf("the running instance's socket %s is gone after the old instance stopped: %v", p, err)
				continue
			}
			c.Close()
		}
	})
}
