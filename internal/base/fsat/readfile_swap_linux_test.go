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

// TestReadFileRacesSwaps: the record is exchanged (RENAME_EXCHANGE) with a
// FIFO, a character device (the null device's numbers), a symlink to a
// sentinel file and a directory, out and back, thousands of times, while
// it is read. ReadFile never opens the FIFO or the device
// (opening a device can act on it: a watchdog arms; inotify sees every
// open of either), never blocks, never follows the symlink, and returns
// either the record byte for byte or an error saying what it found
// instead; the sentinel is never read.
func TestReadFileRacesSwaps(t *testing.T) {
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
	// Every open of the FIFO or the device, wherever a swap has put it
	// (the watches follow the inodes), is an IN_OPEN event; an O_PATH
	// descriptor opens nothing and makes none.
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	must(err)
	defer unix.Close(in)
	for _, name := range []string{"fifo", "dev"} {
		_, err := unix.InotifyAddWatch(in, filepath.Join(dir, name), unix.IN_OPEN)
		must(err)
	}

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
	for i := 0; i < 20000 && time.Now().Before(deadline); i++ {
		b, err := d.ReadFile("record", 1<<10)
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
			t.Fatalf("ReadFile: %v", err)
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
	buf := make([]byte, 64<<10)
	if n, err := unix.Read(in, buf); n > 0 {
		t.Errorf("the FIFO or the device was opened (%d bytes of inotify IN_OPEN events)", n)
	} else if err != unix.EAGAIN {
		t.Errorf("reading the inotify events: %v", err)
	}
	t.Logf("%d swaps; read the record %d times, refused %v", swaps.Load(), read, refused)
	if read == 0 || len(refused) == 0 {
		t.Fatalf("the race was not run both ways: read %d, refused %v", read, refused)
	}
}
