package mountdetect

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// makeBigDir creates files files with 40-byte names (64-byte getdents64
// records) and dirs subdirectories holding one file each in dir: with
// 50,000 files about 3 MiB of records, three times the standard buffer.
func makeBigDir(t *testing.T, dir string, files, dirs int) {
	t.Helper()
	pad := strings.Repeat("x", 32)
	makeFiles(t, dir, files, func(i int) string { return fmt.Sprintf("%s%08d", pad, i) })
	for i := range dirs {
		sub := filepath.Join(dir, fmt.Sprintf("sub%d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScratchReadGrowsForLargeDirectory: a directory whose records fill
// the 1 MiB buffer is read on into a grown buffer (one batch sorted by
// inode covers it), never past maxBatchSize, and a grown scratch does not
// go back to the pool.
func TestScratchReadGrowsForLargeDirectory(t *testing.T) {
	dir := filepath.Join(mounttest.MemTempDir(t), "big")
	makeBigDir(t, dir, 50_000, 0)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	sc := &scratch{buf: make([]byte, direntBufSize)}
	n, err := sc.read(fd, true)
	if err != nil {
		t.Fatal(err)
	}
	if n <= direntBufSize || len(sc.buf) != 4*direntBufSize {
		t.Fatalf("read %d bytes into a %d-byte buffer; want more than %d bytes, buffer grown to %d", n, len(sc.buf), direntBufSize, 4*direntBufSize)
	}
	names := 0
	for off := 0; off < n; {
		d, next, err := nextDirent(sc.buf[:n], off)
		if err != nil {
			t.Fatal(err)
		}
		if !isDotOrDotDot(d.name) {
			names++
		}
		off = next
	}
	if names != 50_000 {
		t.Fatalf("one batch holds %d names; want all 50000", names)
	}
	if n, err := sc.read(fd, true); n != 0 || err != nil {
		t.Fatalf("read after the end = %d, %v; want 0, nil", n, err)
	}

	// The cap: a buffer already at maxBatchSize is not grown further.
	big := &scratch{buf: make([]byte, maxBatchSize)}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := big.read(fd, true); err != nil || len(big.buf) != maxBatchSize {
		t.Fatalf("read with a full-size buffer: %v, buffer %d bytes; want %d", err, len(big.buf), maxBatchSize)
	}
	putScratch(big) // dropped, not pooled: nothing to observe but no panic

	// Without grow (tmpfs, DiskUsage) a batch is one standard buffer.
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		t.Fatal(err)
	}
	std := &scratch{buf: make([]byte, direntBufSize)}
	if n, err := std.read(fd, false); err != nil || n > direntBufSize || len(std.buf) != direntBufSize {
		t.Fatalf("read without grow = %d, %v, buffer %d bytes; want at most one %d-byte buffer", n, err, len(std.buf), direntBufSize)
	}
}

// TestRemoveAllLargeDirectory removes and measures a directory larger than
// one standard batch, with subdirectories among the files, serially and in
// parallel.
// On tmpfs the walk keeps the listed order in standard batches; on ext4 it
// sorts grown batches by inode (the path the benchmark's million-file
// directories take).
func TestRemoveAllLargeDirectory(t *testing.T) {
	bases := map[string]func(t *testing.T) string{
		"tmpfs": func(t *testing.T) string { return mounttest.MemTempDir(t) },
		"ext4":  func(t *testing.T) string { return mounttest.LoopFS(t, "ext4", 512<<20, "", "-q", "-F", "-N", "60000") },
	}
	for _, fs := range []string{"tmpfs", "ext4"} {
		for _, workers := range []int{1, 2} {
			t.Run(fmt.Sprintf("fs=%s/workers=%d", fs, workers), func(t *testing.T) {
				dir := filepath.Join(bases[fs](t), "big")
				makeBigDir(t, dir, 50_000, 20)
				u, err := DiskUsage(dir)
				if err != nil {
					t.Fatal(err)
				}
				if want := int64(50_000 + 2*20 + 1); u.Inodes != want {
					t.Fatalf("DiskUsage(%s).Inodes = %d; want %d", dir, u.Inodes, want)
				}
				if err := RemoveAll(dir, Workers(workers)); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Lstat(dir); !os.IsNotExist(err) {
					t.Fatalf("%s still there after RemoveAll: %v", dir, err)
				}
			})
		}
	}
}
