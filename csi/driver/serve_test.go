package driver

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
