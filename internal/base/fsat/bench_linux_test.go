package fsat_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// BenchmarkReadFile reads an emptyDir record (21 bytes) from a metadata
// directory on tmpfs, as a scan does for every emptyDir volume, and lists
// such a directory (four entries), as it does for every plugin and
// metadata directory.
func BenchmarkReadFile(b *testing.B) {
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
	defer d.Close()
	b.Run("record", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.ReadFile("nodevol.json", 64<<10); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("listing", func(b *testing.B) {
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
	})
}
