package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestServeNeverRemovesAFile: a socket path holding a file (a mistaken
// --endpoint, say) is an error, and the file stays.
func TestServeNeverRemovesAFile(t *testing.T) {
	d, err := New(Config{NodeID: "n", KubeletRoot: "/var/lib/kubelet"})
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
