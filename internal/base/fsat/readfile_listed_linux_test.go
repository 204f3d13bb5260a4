package fsat_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestReadListedFileRacesSwaps: the record a listing gave as a regular
// file is exchanged (RENAME_EXCHANGE), between the listing and
// ReadListedFile's open, with a FIFO, a character device (the null
// device's numbers), a symlink to a sentinel file and a directory,
// thousands of times. ReadListedFile never blocks, never follows the
// symlink, and returns either the record byte for byte or an error
// saying what it found instead; the sentinel is never read.
func TestReadListedFileRacesSwaps(t *testing.T) {
	mounttest.RequireRoot(t, "mknod of a character device")
	dir := t.TempDir()
	record := []byte(`{"medium":"Memory"}` + "\n")
	sentinel := []byte("SENTINEL: not the record\n")
	mounttest.Build(t, dir, "file sentinel "+string(sentinel), "dir d")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	d, err := fsat.OpenRoot(dir)
	must(err)
	defer d.Close()
	must(d.WriteFileAtomic("record", record, 0o600))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(unix.Mknod(filepath.Join(dir, "dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	must(unix.Symlink("sentinel", filepath.Join(dir, "link")))

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		others := []string{"fifo", "dev", "link", "d"}
		for i := 0; !stop.Load(); i++ {
			o := filepath.Join(dir, others[i%len(others)])
			// Out and back: between the two, "record" is the other one.
			if unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "record"), unix.AT_FDCWD, o, unix.RENAME_EXCHANGE) == nil {
				swaps.Add(1)
				_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "record"), unix.AT_FDCWD, o, unix.RENAME_EXCHANGE)
			}
		}
	}()
	read, refused := 0, map[string]int{}
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
		listed := false
		must(d.EachEntry(func(e fsat.Entry) error {
			if e.Name == "record" && e.Type == 0 {
				listed = true
			}
			return nil
		}))
		if !listed {
			continue
		}
		b, err := d.ReadListedFile("record", 1<<10)
		switch {
		case err == nil:
			if !bytes.Equal(b, record) {
				t.Fatalf("read %q, want the record %q", b, record)
			}
			read++
		case errors.Is(err, fsat.ErrNotRegular):
			refused["not regular"]++
		case errors.Is(err, fsat.ErrSymlink):
			refused["symlink"]++
		case errors.Is(err, unix.ENOENT):
			refused["gone"]++
		default:
			t.Fatalf("ReadListedFile: %v", err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if got, err := unix.Open(filepath.Join(dir, "sentinel"), unix.O_RDONLY, 0); err == nil {
		buf := make([]byte, 100)
		n, _ := unix.Read(got, buf)
		unix.Close(got)
		if !bytes.Equal(buf[:n], sentinel) {
			t.Errorf("sentinel changed: %q", buf[:n])
		}
	}
	t.Logf("%d swaps; read the record %d times, refused %v", swaps.Load(), read, refused)
	if read == 0 || len(refused) == 0 {
		t.Fatalf("the race was not run both ways: read %d, refused %v", read, refused)
	}
}

// TestReadListedFileRefusesAsReadFile: without the statx before the
// open, ReadListedFile refuses what ReadFile refuses — a symlink, a FIFO
// (without blocking), a directory, a file larger than max, a file that is
// a mount point (openat2 will not cross onto it) — and reads a regular
// file whole.
func TestReadListedFileRefusesAsReadFile(t *testing.T) {
	mounttest.RequireMounts(t)
	dir := t.TempDir()
	mounttest.Build(t, dir, "file f data", "file empty", "symlink link f", "dir sub", "file mounted x")
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, filepath.Join(dir, "f"), filepath.Join(dir, "mounted"))
	d, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		file string
		max  int64
		want error // nil: "data" ("" for empty)
	}{
		{"f", 4, nil}, {"empty", 4, nil}, {"f", 3, fsat.ErrTooLarge}, {"link", 100, fsat.ErrSymlink},
		{"fifo", 100, fsat.ErrNotRegular}, {"sub", 100, fsat.ErrNotRegular}, {"mounted", 100, fsat.ErrOtherMount},
		{"missing", 100, unix.ENOENT},
	} {
		b, err := d.ReadListedFile(tc.file, tc.max)
		switch {
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("ReadListedFile(%q) = %q, %v; want %v", tc.file, b, err, tc.want)
		case tc.want == nil && err != nil:
			t.Errorf("ReadListedFile(%q): %v", tc.file, err)
		case tc.want == nil && tc.file == "f" && string(b) != "data", tc.want == nil && tc.file == "empty" && len(b) != 0:
			t.Errorf("ReadListedFile(%q) = %q", tc.file, b)
		}
	}
}
