package mountdetect

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// Reproduce (as root for the ext4 image and the mount-table benchmark):
//
//	go test -run '^$' -bench . -benchtime 3x ./mountdetect
//
// Results and the machine they came from are in docs/benchmarks.md.

const benchFiles = 100_000

// benchFilesystems returns the directories to benchmark removal on: a tmpfs
// and, as root, a freshly made ext4 filesystem on a loop device (a real
// on-disk filesystem; this CI machine's root filesystem spends ~0.5 ms of
// kernel time per file creation, which would make building 100k-file trees
// take minutes).
func benchFilesystems(b *testing.B) map[string]string {
	fss := map[string]string{"tmpfs": mounttest.MemTempDir(b)}
	if os.Geteuid() == 0 && mounttest.InPrivateNamespace() {
		fss["ext4-loop"] = mounttest.LoopFS(b, "ext4", 4<<30, "", "-q", "-F")
	}
	return fss
}

// makeTree creates dirs directories of files/dirs files each (dirs == 0:
// one flat directory of files files).
func makeTree(b *testing.B, root string, dirs, files int) {
	b.Helper()
	if dirs == 0 {
		makeFlatDir(b, root, files)
		return
	}
	for d := range dirs {
		makeFlatDir(b, filepath.Join(root, fmt.Sprintf("dir%03d", d)), files/dirs)
	}
}

func BenchmarkRemoveAll(b *testing.B) {
	removers := []struct {
		name string
		fn   func(string) error
	}{
		{"nodevol-workers=1", func(p string) error { return RemoveAll(p) }},
		{"nodevol-workers=2", func(p string) error { return RemoveAll(p, Workers(2)) }},
		{"nodevol-workers=4", func(p string) error { return RemoveAll(p, Workers(4)) }},
		{"os.RemoveAll", os.RemoveAll},
		{"rm-rf", func(p string) error { return exec.Command("rm", "-rf", p).Run() }},
	}
	shapes := []struct {
		name string
		dirs int
	}{{"flat", 0}, {"100dirs", 100}}
	for fsName, base := range benchFilesystems(b) {
		for _, shape := range shapes {
			for _, r := range removers {
				b.Run(fmt.Sprintf("fs=%s/shape=%s/%s", fsName, shape.name, r.name), func(b *testing.B) {
					for i := 0; b.Loop(); i++ {
						b.StopTimer()
						root := filepath.Join(base, fmt.Sprintf("tree-%d", i))
						makeTree(b, root, shape.dirs, benchFiles)
						unix.Sync()
						b.StartTimer()
						if err := r.fn(root); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchFiles), "ns/file")
				})
			}
		}
	}
}

// BenchmarkMountCheck measures the per-directory mount check with no extra
// mounts and with 5,000 tmpfs mounts in the namespace: the check must cost
// the same (it never reads the mount table). Reading the mount table
// (NestedMounts) is the baseline that does grow; listing the unique IDs
// (ListMounts), which every read of the table now does too, is measured
// beside it.
func BenchmarkMountCheck(b *testing.B) {
	base := b.TempDir()
	mounttest.Build(b, base, "dir plain/sub")
	plain := filepath.Join(base, "plain")
	for _, extra := range []int{0, 5000} {
		if extra > 0 {
			mounttest.ManyMounts(b, filepath.Join(base, "many"), extra)
		}
		pfd, err := unix.Open(plain, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		w := &walk{s: autoStrategy()}
		parent := &dirNode{fd: pfd, name: plain}
		if q := w.s.mountQuery(); q != 0 {
			s, err := fsat.StatMount(pfd, "", q)
			if err != nil {
				b.Fatal(err)
			}
			w.rootMnt = s.Key()
		}
		b.Run(fmt.Sprintf("mounts=+%d/walk-openDir", extra), func(b *testing.B) {
			for b.Loop() {
				fd, crossed, err := w.openDir(parent, "sub")
				if err != nil || crossed {
					b.Fatal(err, crossed)
				}
				unix.Close(fd)
			}
		})
		b.Run(fmt.Sprintf("mounts=+%d/IsMountPoint", extra), func(b *testing.B) {
			for b.Loop() {
				if m, sure, err := IsMountPoint(plain); m || !sure || err != nil {
					b.Fatal(m, sure, err)
				}
			}
		})
		b.Run(fmt.Sprintf("mounts=+%d/NestedMounts(mountinfo)", extra), func(b *testing.B) {
			for b.Loop() {
				if _, err := NestedMounts(plain); err != nil {
					b.Fatal(err)
				}
			}
		})
		// What reading the table adds to tell a mount from one made in
		// its place (the unique IDs): one call, whatever NestedMounts
		// costs.
		b.Run(fmt.Sprintf("mounts=+%d/ListMounts", extra), func(b *testing.B) {
			for b.Loop() {
				if _, err := fsat.ListMounts(); err != nil {
					b.Fatal(err)
				}
			}
		})
		unix.Close(pfd)
	}
}

// BenchmarkDiskUsage measures DiskUsage over the RemoveAll benchmark's
// trees (built once; the walk only reads), after a first walk has warmed
// the caches.
func BenchmarkDiskUsage(b *testing.B) {
	shapes := []struct {
		name string
		dirs int
	}{{"flat", 0}, {"100dirs", 100}}
	for fsName, base := range benchFilesystems(b) {
		for _, shape := range shapes {
			root := filepath.Join(base, "usage-"+shape.name)
			makeTree(b, root, shape.dirs, benchFiles)
			b.Run(fmt.Sprintf("fs=%s/shape=%s", fsName, shape.name), func(b *testing.B) {
				for b.Loop() {
					u, err := DiskUsage(root)
					if err != nil {
						b.Fatal(err)
					}
					if want := int64(benchFiles + shape.dirs + 1); u.Inodes != want {
						b.Fatalf("DiskUsage(%q).Inodes = %d; want %d", root, u.Inodes, want)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchFiles), "ns/file")
			})
		}
	}
}
