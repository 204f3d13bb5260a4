package driver

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestServeNeverRemovesAFile: a socket path holding a file (a mistaken
// --endpoint, say) is an error, and the file stays.
func TestServeNeverRemovesAFile(t *testing.T) {
	d, err := New(Config{NodeID: "n", KubeletRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "precious")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []ServeOptions{
		{Endpoint: file},
		{Endpoint: filepath.Join(dir, "csi.sock"), RegistrationDir: dir, KubeletEndpoint: "/x"},
	} {
		if opts.RegistrationDir != "" {
			if err := os.WriteFile(filepath.Join(dir, DefaultName+"-reg.sock"), []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Serve(context.Background(), opts); !errors.Is(err, ErrSocketPath) {
			t.Errorf("Serve(%+v) = %v; want ErrSocketPath", opts, err)
		}
	}
	for _, p := range []string{file, filepath.Join(dir, DefaultName+"-reg.sock")} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "keep" {
			t.Errorf("%s: %q, %v; want it kept", p, b, err)
		}
	}
}

// TestListenUnixOwnerOnly: the socket is 0600 whatever the umask, and
// nothing else appears in its directory (the kubelet watches the
// registration directory).
func TestListenUnixOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	lis, remove, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Errorf("directory holds %v, %v; want the socket only", ents, err)
	}
	remove()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("after remove: %v", err)
	}
}

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

// TestServeShutdownRemovesOnlyItsSockets: Serve's shutdown removes the
// sockets it made and nothing that took their place:
//   - a file put at a socket path meanwhile stays (a file at a socket path
//     is never removed);
//   - a second instance of the driver (a DaemonSet rolling update with
//     surge, a restart that overlaps) that replaced the sockets with its
//     own keeps them when the first one shuts down, so the kubelet's plugin
//     watcher does not deregister the driver that is still running.
func TestServeShutdownRemovesOnlyItsSockets(t *testing.T) {
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
