package fsat_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestReopenThroughTheTreesProcFds: the Dirs of one tree (OpenRoot and
// every Dir opened from it, by either walk or MkdirAll) reopen files
// through one shared /proc/self/fd descriptor, opened at the first reopen
// and closed with the last Dir of the tree, whichever order they close in:
// not before (a Dir outliving its root still reads), not twice (a
// descriptor that took its number meanwhile stays open), never leaked.
func TestReopenThroughTheTreesProcFds(t *testing.T) {
	dir := t.TempDir()
	mounttest.Build(t, dir, "file a/b/f data", "file f root")
	before := openFds(t)

	root, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := root.OpenDir("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.OpenDir("b", fsat.SameMount)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := root.OpenDir("a/b", fsat.SlowWalk, fsat.SameMount)
	if err != nil {
		t.Fatal(err)
	}
	made, err := root.MkdirAll("x/y", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	// MkdirAll reopened each component it made: the tree's descriptor is
	// open, and every Dir of the tree has the same.
	proc := fsat.ProcFd(root)
	if proc < 0 {
		t.Fatalf("after MkdirAll the tree's /proc/self/fd descriptor is %d; want it open", proc)
	}
	for _, d := range []*fsat.Dir{a, b, slow, made} {
		if got := fsat.ProcFd(d); got != proc {
			t.Errorf("%s reopens through %d; the tree's descriptor is %d", d.Path(), got, proc)
		}
	}
	if link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(proc)); err != nil || link != "/proc/"+strconv.Itoa(os.Getpid())+"/fd" {
		t.Errorf("descriptor %d names %q (%v); want this process's /proc fd directory", proc, link, err)
	}

	// The root and a first: the others still read.
	root.Close()
	a.Close()
	for _, d := range []*fsat.Dir{b, slow} {
		if got, err := d.ReadFile("f", 10); err != nil || string(got) != "data" {
			t.Errorf("ReadFile in %s after the root closed = %q, %v", d.Path(), got, err)
		}
	}
	b.Close()
	made.Close()
	if fsat.ProcFd(slow) != proc {
		t.Fatalf("the tree's descriptor went with Dirs of the tree still open")
	}
	slow.Close()
	slow.Close() // a second Close releases nothing more
	// Whatever took the descriptor's number after the last Close must not
	// be closed by anything of the tree.
	sentinel, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sentinel)
	root.Close()
	a.Close()
	if _, err := unix.FcntlInt(uintptr(sentinel), unix.F_GETFD, 0); err != nil {
		t.Errorf("a descriptor opened after the tree closed was closed by it: %v", err)
	}
	if after := openFds(t); after != before+1 {
		t.Errorf("%d descriptors open after the tree closed, %d before (and the sentinel): leaked or closed one too many", after, before)
	}

	// A Dir of a caller's descriptor reopens by path, and holds nothing.
	fd, err := unix.Open(filepath.Join(dir, "a", "b"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	own := fsat.FromFd(fd, "own")
	if got, err := own.ReadFile("f", 10); err != nil || string(got) != "data" || fsat.ProcFd(own) != -3 {
		t.Errorf("ReadFile in a Dir of a caller's descriptor = %q, %v (its tree descriptor %d)", got, err, fsat.ProcFd(own))
	}
	own.Close()
}

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries) - 1 // ReadDir's own
}
