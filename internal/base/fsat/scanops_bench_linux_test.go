package fsat_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// BenchmarkReadFile reads an emptyDir record (21 bytes) from a metadata
// directory on tmpfs, as a scan does for every emptyDir volume.
func BenchmarkReadFile(b *testing.B) {
	d := recordDir(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.ReadFile("nodevol.json", 64<<10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEachEntry opens and lists such a directory (four entries), as a
// scan does for every plugin and metadata directory.
func BenchmarkEachEntry(b *testing.B) {
	d := recordDir(b)
	b.ReportAllocs()
	for b.Loop() {
		sub, err := d.OpenDir("", fsat.SameMount)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := sub.EachEntry(func(fsat.Entry) error { n++; return nil }); err != nil || n != 4 {
			b.Fatal(n, err)
		}
		sub.Close()
	}
}

// recordDir is a tmpfs directory of four files of a record's size, open.
func recordDir(b *testing.B) *fsat.Dir {
	dir := b.TempDir()
	mounttest.Tmpfs(b, dir, "size=1m")
	for _, name := range []string{"nodevol.json", "a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"medium":"Default"}`+"\n"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	d, err := fsat.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}
