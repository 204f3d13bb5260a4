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

// TestBorrowedDirJoinsTheTreeAndStaysOpen: a Dir of a descriptor its
// caller lends (Borrow) reads through the lending tree's /proc/self/fd
// descriptor, and so do the Dirs opened from it; its Close gives back
// its reference and leaves the caller's descriptor open; the tree's
// descriptor closes with the last Dir of the tree, borrowed or not.
func TestBorrowedDirJoinsTheTreeAndStaysOpen(t *testing.T) {
	dir := t.TempDir()
	mounttest.Build(t, dir, "file a/b/f data")
	before := openFds(t)
	lent, err := unix.Open(filepath.Join(dir, "a"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	root, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := root.Borrow(lent, filepath.Join(dir, "a"))
	b, err := a.OpenDir("b")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadFile("f", 10); err != nil || string(got) != "data" {
		t.Fatalf("ReadFile below a borrowed Dir = %q, %v", got, err)
	}
	proc := fsat.ProcFd(root)
	if proc < 0 || fsat.ProcFd(a) != proc || fsat.ProcFd(b) != proc {
		t.Fatalf("tree descriptor %d; the borrowed Dir reopens through %d, its child through %d", proc, fsat.ProcFd(a), fsat.ProcFd(b))
	}
	root.Close()
	b.Close()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(lent), unix.F_GETFD, 0); err != nil {
		t.Fatalf("closing the borrowed Dir closed the lender's descriptor: %v", err)
	}
	// The lender's descriptor is all that is left open of the tree.
	if after := openFds(t); after != before+1 {
		t.Errorf("%d descriptors open after the tree closed, %d before (and the lent one)", after, before)
	}
	unix.Close(lent)

	// Without a tree it reads by path and holds nothing.
	lent, err = unix.Open(filepath.Join(dir, "a", "b"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lent)
	var none *fsat.Dir
	alone := none.Borrow(lent, "alone")
	if got, err := alone.ReadFile("f", 10); err != nil || string(got) != "data" || fsat.ProcFd(alone) != -3 {
		t.Errorf("ReadFile in a Dir borrowed outside a tree = %q, %v (tree descriptor %d)", got, err, fsat.ProcFd(alone))
	}
	alone.Close()
	if _, err := unix.FcntlInt(uintptr(lent), unix.F_GETFD, 0); err != nil {
		t.Errorf("closing a Dir borrowed outside a tree closed the descriptor: %v", err)
	}
}
