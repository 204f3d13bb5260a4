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

// TestProcFdsSharedAcrossGoroutines: the Dirs of one tree used from many
// goroutines at once (each opening, reading through and closing its own
// Dirs of a root they share, the first reopens racing to open the tree's
// /proc/self/fd descriptor) while other goroutines open and close
// descriptors as fast as they can, among them decoy directories that hold
// a file named after every small descriptor number: a reopen through a
// /proc/self/fd descriptor closed early and its number taken by a decoy
// would read the decoy's file. Every read returns the sentinel byte for
// byte, and once the root and every Dir are closed, nothing of the tree is
// left open.
func TestProcFdsSharedAcrossGoroutines(t *testing.T) {
	dir := t.TempDir()
	const sentinel = "sentinel\x00\xffdata"
	for _, sub := range []string{"a/b"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sub, "f"), []byte(sentinel), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	decoy := makeDecoys(t, dir)
	before := openFds(t)

	for round := range 10 {
		root, err := fsat.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		stopChurn := churnDescriptors(decoy)
		var wg, opened sync.WaitGroup
		var bad atomic.Int64
		for g := range 6 {
			wg.Add(1)
			opened.Add(1)
			go func() {
				defer wg.Done()
				// Each goroutine's own Dir of the tree, opened before the
				// root may close; the rest is opened from it.
				base, err := root.OpenDir("a")
				opened.Done()
				if err != nil {
					t.Error(err)
					bad.Add(1)
					return
				}
				defer base.Close()
				for i := range 200 {
					var d *fsat.Dir
					var err error
					switch (g + i) % 3 {
					case 0:
						d, err = base.OpenDir("b", fsat.SameMount)
					case 1:
						d, err = base.OpenDir("b", fsat.SlowWalk, fsat.SameMount)
					default:
						d, err = base.MkdirAll("b", 0o755)
					}
					if err != nil {
						t.Error(err)
						bad.Add(1)
						return
					}
					got, err := d.ReadFile("f", 100)
					if err != nil || string(got) != sentinel {
						if bad.Add(1) < 5 {
							t.Errorf("round %d: ReadFile in %s = %q, %v; want %q", round, d.Path(), got, err, sentinel)
						}
					}
					if i%7 == 0 {
						// One of the goroutine's Dirs outlives the root.
						defer d.Close()
						continue
					}
					d.Close()
				}
			}()
		}
		opened.Wait()
		if round%2 == 1 {
			root.Close() // the root first: its children read on
		}
		wg.Wait()
		root.Close()
		stopChurn()
		if bad.Load() > 0 {
			t.FailNow()
		}
	}
	if after := openFds(t); after != before {
		t.Errorf("%d descriptors open after every tree closed, %d before: leaked or closed one too many", after, before)
	}
}

// makeDecoys makes dir/decoy holding a file named after every small
// descriptor number: a Dir that reopens through a descriptor closed early,
// and taken since by a descriptor of the decoy, reads "DECOY".
func makeDecoys(t *testing.T, dir string) string {
	t.Helper()
	decoy := filepath.Join(dir, "decoy")
	if err := os.Mkdir(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	for n := range 4096 {
		if err := os.WriteFile(filepath.Join(decoy, fmt.Sprint(n)), []byte("DECOY"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return decoy
}

// churnDescriptors opens and closes decoy on two goroutines as fast as
// they can, so that any descriptor number freed is soon taken by a
// decoy, until the function it returns is called (which waits for them).
func churnDescriptors(decoy string) (stop func()) {
	var done atomic.Bool
	var churn sync.WaitGroup
	for range 2 {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for !done.Load() {
				fd, err := unix.Open(decoy, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err == nil {
					unix.Close(fd)
				}
			}
		}()
	}
	return func() {
		done.Store(true)
		churn.Wait()
	}
}
