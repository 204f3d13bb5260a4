package fsat

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestWriteFileAtomic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		perm    uint32
	}{
		{"new file", func(*testing.T, string) {}, 0o600},
		{"replaces a file", func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "old content, longer than the new") }, 0o644},
		{"setuid, setgid and sticky bits kept", func(*testing.T, string) {}, 0o7640},
		{"a symlink is replaced, not followed", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "target"), "target")
			if err := os.Symlink("target", filepath.Join(dir, "f")); err != nil {
				t.Fatal(err)
			}
		}, 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.prepare(t, dir)
			old := syscall.Umask(0o077) // the umask must not apply
			defer syscall.Umask(old)
			d, err := OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := d.WriteFileAtomic("f", []byte("new"), tc.perm); err != nil {
				t.Fatalf("WriteFileAtomic = %v", err)
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(dir, "f"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Mode&0o7777 != tc.perm {
				t.Errorf("f has mode %#o; want a regular file with mode %#o", st.Mode, tc.perm)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "new" {
				t.Errorf("f = %q; want %q", b, "new")
			}
			if b, err := os.ReadFile(filepath.Join(dir, "target")); err == nil && string(b) != "target" {
				t.Errorf("the symlink's target was written: %q", b)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.Contains(e.Name(), ".tmp-") {
					t.Errorf("temporary file %s left behind", e.Name())
				}
			}
		})
	}
}

func TestWriteFileAtomicRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "f"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WriteFileAtomic("f", []byte("new"), 0o600); err == nil {
		t.Fatal("WriteFileAtomic over a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "f" || !entries[0].IsDir() {
		t.Errorf("directory holds %v; want only the directory f (no temporary file)", entries)
	}
}

func TestIsTempOf(t *testing.T) {
	for entry, want := range map[string]bool{
		tempPrefix("projects") + "0123456789abcdef": true,
		tempPrefix("projects") + "0123456789abcde":  false,
		tempPrefix("projects") + "0123456789abcdeg": false,
		tempPrefix("projid") + "0123456789abcdef":   false,
		".projects.tmp-123456789":                   false, // os.CreateTemp's form
	} {
		if got := IsTempOf(entry, "projects"); got != want {
			t.Errorf("IsTempOf(%q, projects) = %v; want %v", entry, got, want)
		}
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEachEntryListsEveryTime: the first listing of a Dir reads its own
// descriptor, later ones open the directory again; a listing stopped
// early (ErrStop) or a second one must still see every entry, never
// continue from the offset the last one left.
func TestEachEntryListsEveryTime(t *testing.T) {
	dir := t.TempDir()
	want := []string{}
	for i := range 300 {
		name := fmt.Sprintf("entry-%03d", i)
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root, err := OpenRoot(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, first := range []string{"whole", "stopped"} {
		d, err := root.OpenDir(filepath.Base(dir))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := d.EachEntry(func(Entry) error {
			if n++; first == "stopped" && n == 10 {
				return ErrStop
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			var got []string
			if err := d.EachEntry(func(e Entry) error { got = append(got, e.Name); return nil }); err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("after a %s first listing, listing %d: %d entries, want %d", first, i+2, len(got), len(want))
			}
		}
		d.Close()
	}
}
