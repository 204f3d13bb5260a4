package fsat_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// TestBorrowedDirsAcrossGoroutinesLeaveTheLentDescriptors: Dirs borrowed
// from one tree, from many goroutines at once, of descriptors each
// goroutine lends (and of one lent to all), read through the tree's
// /proc/self/fd descriptor and close (twice) while other goroutines open
// and close descriptors as fast as they can, among them decoy directories
// holding a file named after every small descriptor number: a borrowed
// Dir that closed its lender's descriptor, or released the tree's
// reference once too often, would let a decoy take that number and a
// later read find the decoy's file. Every read returns the sentinel byte
// for byte; every lent descriptor still names the directory it was
// opened on (its inode, not only "open"); a Dir borrowed from a closed
// tree has none and reads by path; and once the lenders close theirs,
// nothing is left.
func TestBorrowedDirsAcrossGoroutinesLeaveTheLentDescriptors(t *testing.T) {
	dir := t.TempDir()
	const sentinel = "sentinel\x00\xffdata"
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a/f", "a/b/f"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(sentinel), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	decoy := makeDecoys(t, dir)
	var want unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "a"), &want); err != nil {
		t.Fatal(err)
	}
	// same says whether fd is still open on the directory a.
	same := func(fd int) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Ino != want.Ino || st.Dev != want.Dev {
			return fmt.Errorf("descriptor %d now names inode %d, not the lent directory's %d", fd, st.Ino, want.Ino)
		}
		return nil
	}
	openA := func() (int, error) {
		return unix.Open(filepath.Join(dir, "a"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	before := openFds(t)

	for round := range 10 {
		shared, err := openA()
		if err != nil {
			t.Fatal(err)
		}
		root, err := fsat.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		stopChurn := churnDescriptors(decoy)
		var wg, borrowed sync.WaitGroup
		var bad atomic.Int64
		fail := func(format string, args ...any) {
			if bad.Add(1) < 5 {
				t.Errorf("round %d: "+format, append([]any{round}, args...)...)
			}
		}
		for g := range 6 {
			wg.Add(1)
			borrowed.Add(1)
			go func() {
				defer wg.Done()
				lent, err := openA()
				if err != nil {
					fail("%v", err)
					borrowed.Done()
					return
				}
				defer unix.Close(lent)
				// Two Dirs of the goroutine's join the tree before the root
				// may close (Borrow, like any call on the root, does not
				// run beside its Close), and are kept to the end: one
				// borrowed, one opened.
				keep := root.Borrow(shared, filepath.Join(dir, "a"))
				base, err := root.OpenDir("a")
				borrowed.Done()
				defer keep.Close()
				if err != nil {
					fail("%v", err)
					return
				}
				defer base.Close()
				for i := range 300 {
					fd := lent
					if (g+i)%2 == 0 {
						fd = shared
					}
					var b *fsat.Dir
					if i%2 == 0 {
						b = keep.Borrow(fd, filepath.Join(dir, "a"))
					} else {
						b = base.Borrow(fd, filepath.Join(dir, "a"))
					}
					if got, err := b.ReadFile("f", 100); err != nil || string(got) != sentinel {
						fail("ReadFile in a borrowed Dir = %q, %v; want %q", got, err, sentinel)
					}
					sub, err := b.OpenDir("b", fsat.SameMount)
					if err != nil {
						fail("%v", err)
					} else {
						if got, err := sub.ReadFile("f", 100); err != nil || string(got) != sentinel {
							fail("ReadFile below a borrowed Dir = %q, %v; want %q", got, err, sentinel)
						}
						if i%3 == 0 {
							// A child outlives the Dir it was opened from.
							defer sub.Close()
						} else {
							sub.Close()
						}
					}
					if err := b.Close(); err != nil {
						fail("Close of a borrowed Dir: %v", err)
					}
					b.Close()
					if err := same(fd); err != nil {
						fail("after a borrowed Dir closed: %v", err)
					}
					// base and keep hold the tree: its descriptor is open
					// (it was opened by the reads) and stays so.
					if p := fsat.ProcFd(base); p < 0 || fsat.ProcFd(keep) != p {
						fail("the tree's /proc/self/fd descriptor is %d (%d for the Dir kept) with Dirs of the tree open", p, fsat.ProcFd(keep))
					}
				}
				if got, err := keep.ReadFile("f", 100); err != nil || string(got) != sentinel {
					fail("ReadFile in the Dir kept = %q, %v; want %q", got, err, sentinel)
				}
			}()
		}
		borrowed.Wait()
		if round%2 == 1 {
			root.Close() // the lender's tree first: the borrowed read on
		}
		wg.Wait()
		root.Close()
		stopChurn()
		if err := same(shared); err != nil {
			t.Errorf("round %d: the descriptor lent to every goroutine: %v", round, err)
		}
		// Borrowed from a closed tree: a Dir with none, which reads by
		// path and closes nothing.
		late := root.Borrow(shared, filepath.Join(dir, "a"))
		if got, err := late.ReadFile("f", 100); err != nil || string(got) != sentinel || fsat.ProcFd(late) != -3 {
			t.Errorf("round %d: ReadFile in a Dir borrowed from a closed tree = %q, %v (tree descriptor %d)", round, got, err, fsat.ProcFd(late))
		}
		late.Close()
		if err := same(shared); err != nil {
			t.Errorf("round %d: after a Dir borrowed from a closed tree closed: %v", round, err)
		}
		unix.Close(shared)
		if bad.Load() > 0 {
			t.FailNow()
		}
	}
	if after := openFds(t); after != before {
		t.Errorf("%d descriptors open after every tree and lender closed, %d before: leaked or closed one too many", after, before)
	}
}

// TestBorrowedDirListsWithAnOffsetOfItsOwn: a descriptor lent already
// listed to its end (as ScanVolumes lends a plugin directory) is listed
// whole through a Dir borrowing it, and its own offset is not moved (the
// lender may go on reading it).
func TestBorrowedDirListsWithAnOffsetOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lent, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lent)
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(lent, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	end, err := unix.Seek(lent, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	root, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, b := range []*fsat.Dir{root.Borrow(lent, dir), (*fsat.Dir)(nil).Borrow(lent, dir)} {
		for range 2 {
			entries, err := b.ReadEntries()
			if err != nil || len(entries) != 3 || entries[0].Name != "a" || entries[2].Name != "c" {
				t.Errorf("a borrowed Dir of a descriptor listed to its end lists %v, %v; want a, b and c", entries, err)
			}
		}
		if off, err := unix.Seek(lent, 0, 1); err != nil || off != end {
			t.Errorf("listing a borrowed Dir moved the lender's offset from %d to %d (%v)", end, off, err)
		}
		b.Close()
	}
}

// TestBorrowOfNoDescriptorHoldsNothing: a Dir borrowed of no descriptor
// (-1, what a PluginDir made otherwise than by a listing may hold) takes
// no reference of the tree, which Close, a no-op on such a Dir, would
// never give back: the tree's /proc/self/fd descriptor closes with the
// tree's last Dir all the same.
func TestBorrowOfNoDescriptorHoldsNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := openFds(t)
	root, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := root.ReadFile("f", 10); err != nil || string(got) != "data" || fsat.ProcFd(root) < 0 {
		t.Fatalf("ReadFile = %q, %v (tree descriptor %d)", got, err, fsat.ProcFd(root))
	}
	none := root.Borrow(-1, "none")
	if _, err := none.ReadFile("f", 10); err == nil {
		t.Error("ReadFile in a Dir of no descriptor succeeded")
	}
	none.Close()
	root.Close()
	if after := openFds(t); after != before {
		t.Errorf("%d descriptors open after the tree closed, %d before: the tree's /proc/self/fd descriptor leaked", after, before)
	}
}
