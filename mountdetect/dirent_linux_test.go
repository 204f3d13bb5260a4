package mountdetect

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// record builds one linux_dirent64 record padded to 8 bytes.
func record(ino uint64, typ uint8, name string) []byte {
	reclen := (direntNameOff + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint64(b, ino)
	binary.NativeEndian.PutUint16(b[direntReclenOff:], uint16(reclen))
	b[direntTypeOff] = typ
	copy(b[direntNameOff:], name)
	return b
}

func parseAll(buf []byte) ([]string, error) {
	var names []string
	for off := 0; off < len(buf); {
		d, next, err := nextDirent(buf, off)
		if err != nil {
			return names, err
		}
		if buf[d.nameStart+len(d.name)] != 0 {
			return names, errBadDirent
		}
		names = append(names, string(d.name))
		off = next
	}
	return names, nil
}

// TestDirentMatchesKernel parses what getdents64 really returns.
func TestDirentMatchesKernel(t *testing.T) {
	dir := t.TempDir()
	want := []string{".", "..", "a", "bb", "a-much-longer-name-to-vary-the-record-length"}
	for _, n := range want[2:] {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseAll(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("parsed %q; want %q", got, want)
	}
}

func TestDirentRejectsMalformed(t *testing.T) {
	good := record(1, unix.DT_REG, "name")
	for name, buf := range map[string][]byte{
		"short header":   good[:10],
		"reclen too big": append(bytes.Clone(good[:direntReclenOff]), 0xff, 0x00, 0, 'a', 0),
		"reclen tiny":    append(bytes.Clone(good[:direntReclenOff]), 0x04, 0x00, 0, 'a', 0, 0, 0, 0),
		"no NUL":         func() []byte { b := bytes.Clone(good); copy(b[direntNameOff:], "namexxxxx"); return b }(),
		"empty name":     record(1, unix.DT_REG, ""),
	} {
		if _, err := parseAll(buf); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

func FuzzDirent(f *testing.F) {
	f.Add(append(record(1, unix.DT_DIR, "."), record(2, unix.DT_REG, "file")...))
	f.Add(record(3, unix.DT_LNK, "x"))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, buf []byte) {
		for off := 0; off < len(buf); {
			d, next, err := nextDirent(buf, off)
			if err != nil {
				return
			}
			if next <= off || next > len(buf) {
				t.Fatalf("next offset %d after %d out of range %d", next, off, len(buf))
			}
			end := d.nameStart + len(d.name)
			if len(d.name) == 0 || end >= next || buf[end] != 0 || bytes.IndexByte(d.name, 0) >= 0 {
				t.Fatalf("bad name %q at %d", d.name, d.nameStart)
			}
			off = next
		}
	})
}
