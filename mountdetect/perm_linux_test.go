package mountdetect

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveAllPermissionDenied: a directory the caller may not write
// makes RemoveAll fail with a *os.PathError matching fs.ErrPermission that
// names the file, while everything else is removed and nothing else is
// lost. Root bypasses permission checks, so as root the scenario runs as
// user nobody (asNobody).
func TestRemoveAllPermissionDenied(t *testing.T) {
	asNobody(t, "permission", nil)
}

func permissionScenario(t *testing.T, base string) {
	vol := filepath.Join(base, "vol")
	for _, f := range []string{"locked/a", "locked/b", "free/f", "top"} {
		p := filepath.Join(vol, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	locked := filepath.Join(vol, "locked")
	if err := os.Chmod(locked, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(locked, 0o755); os.RemoveAll(vol) })
	for _, v := range variants(t) {
		err := RemoveAll(vol, v.opts()...)
		var pe *os.PathError
		if !errors.As(err, &pe) || !errors.Is(err, fs.ErrPermission) || filepath.Dir(pe.Path) != locked {
			t.Fatalf("%s: RemoveAll = %v; want a *os.PathError matching fs.ErrPermission naming a file in %s", v, err, locked)
		}
		if errors.Is(err, ErrCrossesMount) {
			t.Errorf("%s: a permission failure is not a mount: %v", v, err)
		}
		for _, f := range []string{"locked/a", "locked/b"} {
			if b, err := os.ReadFile(filepath.Join(vol, f)); err != nil || string(b) != f {
				t.Errorf("%s: %s = %q, %v; want intact", v, f, b, err)
			}
		}
		mustNotExist(t, filepath.Join(vol, "free"))
		mustNotExist(t, filepath.Join(vol, "top"))
	}
	// Unreadable start directory: a clear error, nothing lost.
	os.Chmod(locked, 0o755)
	if err := os.Chmod(vol, 0o300); err != nil {
		t.Fatal(err)
	}
	err := RemoveAll(vol)
	os.Chmod(vol, 0o755)
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("RemoveAll(unreadable dir) = %v; want fs.ErrPermission", err)
	}
	if _, err := os.Stat(filepath.Join(vol, "locked/a")); err != nil {
		t.Errorf("unreadable dir lost data: %v", err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
