package mountdetect

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkRemoveFlatInterleaved (issue 16) removes one flat directory of
// n files with each remover in turn, every round building one identical
// tree per remover and rotating which goes first, so that the page cache,
// the journal and the filesystem's age weigh on each alike (the
// sub-benchmarks of BenchmarkRemoveAll run one remover's rounds after
// another's). It reports each remover's median milliseconds per tree and
// nodevol's time as a fraction of rm -rf's and of the floor: one unlinkat
// per entry over names listed beforehand, with no check at all (what no
// safe removal can beat on one directory).
//
//	go test -run '^$' -bench 'RemoveFlatInterleaved' -benchtime 5x ./mountdetect   # as root for ext4
func BenchmarkRemoveFlatInterleaved(b *testing.B) {
	// prepare runs untimed and returns the timed removal.
	ready := func(fn func(string) error) func(string) (func() error, error) {
		return func(p string) (func() error, error) { return func() error { return fn(p) }, nil }
	}
	removers := []struct {
		name    string
		prepare func(string) (func() error, error)
	}{
		{"nodevol", ready(func(p string) error { return RemoveAll(p) })},
		{"rm-rf", ready(func(p string) error { return exec.Command("rm", "-rf", p).Run() })},
		{"os.RemoveAll", ready(os.RemoveAll)},
		{"floor", func(p string) (func() error, error) { return unlinkFloor(p, true) }},
		{"hash-order", func(p string) (func() error, error) { return unlinkFloor(p, false) }},
	}
	for fsName, base := range benchFilesystems(b) {
		for _, n := range []int{10_000, 100_000} {
			b.Run(fmt.Sprintf("fs=%s/files=%d", fsName, n), func(b *testing.B) {
				took := make([][]time.Duration, len(removers))
				round := 0
				for b.Loop() {
					b.StopTimer()
					// One tree at a time: four trees of 100,000 files
					// would not fit the ext4 image's inodes.
					for k := range removers {
						i := (k + round) % len(removers)
						root := filepath.Join(base, fmt.Sprintf("r%d-%d", round, i))
						makeFlatDir(b, root, n)
						unix.Sync()
						run, err := removers[i].prepare(root)
						if err != nil {
							b.Fatalf("%s: %v", removers[i].name, err)
						}
						start := time.Now()
						if err := run(); err != nil {
							b.Fatalf("%s: %v", removers[i].name, err)
						}
						took[i] = append(took[i], time.Since(start))
					}
					round++
					b.StartTimer()
				}
				med := make([]float64, len(removers))
				for i, r := range removers {
					slices.Sort(took[i])
					med[i] = float64(took[i][len(took[i])/2].Microseconds()) / 1000
					b.ReportMetric(med[i], r.name+"-ms")
				}
				b.ReportMetric(med[0]/med[1], "nodevol/rm")
				b.ReportMetric(med[4]/med[3], "hash-order/floor")
				b.ReportMetric(med[0]/med[3], "nodevol/floor")
				b.ReportMetric(med[1]/med[3], "rm/floor")
			})
		}
	}
}

// unlinkFloor lists dir's entries (untimed: prepare), and returns the
// timed part: one unlinkat per name relative to the directory's
// descriptor, in inode order when byInode (the fastest order known on
// ext4: the inode table is touched in sequence; GNU rm sorts so too) or
// else in the order getdents64 gave (hash order on ext4's htree), then
// the directory's rmdir. With byInode it is the least a removal of a flat
// directory does, with no check at all: the floor.
func unlinkFloor(dir string, byInode bool) (func() error, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	type entry struct {
		ino  uint64
		name string
	}
	var entries []entry
	buf := make([]byte, 1<<20)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		if n == 0 {
			break
		}
		for off := 0; off < n; {
			d, next, err := nextDirent(buf[:n], off)
			if err != nil {
				unix.Close(fd)
				return nil, err
			}
			if !isDotOrDotDot(d.name) {
				entries = append(entries, entry{d.ino, string(d.name)})
			}
			off = next
		}
	}
	if byInode {
		slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.ino, b.ino) })
	}
	return func() error {
		defer unix.Close(fd)
		for _, e := range entries {
			if err := unix.Unlinkat(fd, e.name, 0); err != nil {
				return err
			}
		}
		return unix.Rmdir(dir)
	}, nil
}
