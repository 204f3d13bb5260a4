package mountdetect

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// BenchmarkRemoveInterleaved removes the same tree with each remover in
// turn: every round builds one identical tree per remover just before it
// runs (then syncs), and rotates which remover goes first, so the page
// cache, the journal and the filesystem's age weigh on each alike (the
// sub-benchmarks of BenchmarkRemoveAll run one remover's rounds after
// another's). It reports each remover's median milliseconds per tree, and
// the ratios that docs/benchmarks.md compares: nodevol (one worker) against
// rm -rf and against the floor (ratios of the medians; "-paired" is the
// median of the per-round ratios).
//
// nodevol-cli is the nodevol binary's rm command, started as rm -rf is (a
// like-for-like comparison: process start-up counts for both).
// nodevol-child is RemoveAll in a child process of its own (this test
// binary, started with NODEVOL_BENCH_REMOVE=path): like rm -rf, it does not
// run on the thread and CPU that just built the tree, which favours the
// in-process removers (the kernel objects of the tree were allocated
// there).
//
// The floor is the least any removal of the tree does: one unlinkat per
// entry, in inode order, over names and directory descriptors listed
// beforehand (untimed), through raw system calls — the loop a C program
// would run, with no check and no Go scheduler. floor-go is the same loop
// through the ordinary syscall path (unix.Unlinkat), to show what the Go
// runtime's bookkeeping around each call costs. io_uring is the floor with
// the unlinks submitted in batches through io_uring
// (bench_uring_linux_test.go).
//
// Shapes: flat is one directory of n files; nested is n/100 directories of
// 100 files, two levels deep (√(n/100) directories of √(n/100)). Sizes are
// 10,000 and 100,000 files; NODEVOL_BENCH_MAX=1000000 adds a million.
// Filesystems: tmpfs and, as root in a private mount namespace, ext4 and
// XFS on loop images kept in memory (so the host's disk adds no noise),
// made with their inode tables initialised (ext4's lazy init would
// otherwise write in the background during the rounds).
// NODEVOL_BENCH_REMOVERS=nodevol,rm-rf,floor limits the removers (for the
// long million-file rounds).
//
//	go test -run '^$' -bench 'RemoveInterleaved' -benchtime 5x -timeout 3h ./mountdetect   # as root
func BenchmarkRemoveInterleaved(b *testing.B) {
	ready := func(fn func(string) error) func(string) (func() error, error) {
		return func(p string) (func() error, error) { return func() error { return fn(p) }, nil }
	}
	var bin string // the nodevol command, built below when selected
	all := []remover{
		{"nodevol", ready(func(p string) error { return RemoveAll(p) })},
		{"nodevol-cli", ready(func(p string) error { return runQuiet(bin, "rm", "--allow-foreign-mount-namespace", p) })},
		{"nodevol-child", ready(func(p string) error { return runChild(p) })},
		{"nodevol-workers=2", ready(func(p string) error { return RemoveAll(p, Workers(2)) })},
		{"rm-rf", ready(func(p string) error { return runQuiet("rm", "-rf", p) })},
		{"os.RemoveAll", ready(os.RemoveAll)},
		{"floor", func(p string) (func() error, error) { return unlinkFloor(p, true) }},
		{"floor-go", func(p string) (func() error, error) { return unlinkFloor(p, false) }},
		{"io_uring", unlinkRing},
	}
	var removers []remover
	want := os.Getenv("NODEVOL_BENCH_REMOVERS")
	for _, r := range all {
		if want == "" || slices.Contains(strings.Split(want, ","), r.name) {
			removers = append(removers, r)
		}
	}
	if r, err := newUring(uringDepth); err != nil {
		// Disabled (kernel.io_uring_disabled, a seccomp filter) or older
		// than 5.1: measured without it.
		b.Logf("io_uring remover left out: %v", err)
		removers = slices.DeleteFunc(removers, func(r remover) bool { return r.name == "io_uring" })
	} else {
		r.close()
	}
	index := func(name string) int {
		return slices.IndexFunc(removers, func(r remover) bool { return r.name == name })
	}
	if index("nodevol-cli") >= 0 {
		bin = filepath.Join(b.TempDir(), "nodevol")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/nodevol/nodevol/cmd/nodevol").CombinedOutput(); err != nil {
			b.Fatalf("go build ./cmd/nodevol: %v\n%s", err, out)
		}
	}
	sizes := []int{10_000, 100_000}
	if s := os.Getenv("NODEVOL_BENCH_MAX"); s != "" {
		max, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("NODEVOL_BENCH_MAX=%q: %v", s, err)
		}
		for n := 1_000_000; n <= max; n *= 10 {
			sizes = append(sizes, n)
		}
	}
	for _, fs := range interleavedFilesystems(b, sizes[len(sizes)-1]) {
		for _, shape := range []string{"flat", "nested"} {
			for _, n := range sizes {
				b.Run(fmt.Sprintf("fs=%s/shape=%s/files=%d", fs.name, shape, n), func(b *testing.B) {
					took := make([][]time.Duration, len(removers))
					round := 0
					// Small trees take milliseconds, where run-to-run noise
					// is largest: each iteration runs up to 5 rounds of them.
					repeat := min(5, max(1, 100_000/n))
					for b.Loop() {
						b.StopTimer()
						for range repeat {
							removeRound(b, fs.dir, shape, n, round, removers, took)
							round++
						}
						b.StartTimer()
					}
					// Paired: the median of the per-round ratios, which
					// cancels the machine's drift between rounds.
					paired := func(a, c string) {
						i, j := index(a), index(c)
						if i < 0 || j < 0 {
							return
						}
						r := make([]float64, len(took[i]))
						for k := range r {
							r[k] = took[i][k].Seconds() / took[j][k].Seconds()
						}
						slices.Sort(r)
						b.ReportMetric(r[len(r)/2], a+"/"+c+"-paired")
					}
					paired("nodevol", "rm-rf")
					paired("nodevol-cli", "rm-rf")
					paired("nodevol-child", "rm-rf")
					med := make([]float64, len(removers))
					for i, r := range removers {
						slices.Sort(took[i])
						med[i] = float64(took[i][len(took[i])/2].Microseconds()) / 1000
						b.ReportMetric(med[i], r.name+"-ms")
					}
					ratio := func(a, c string) {
						if i, j := index(a), index(c); i >= 0 && j >= 0 {
							b.ReportMetric(med[i]/med[j], a+"/"+c)
						}
					}
					ratio("nodevol", "rm-rf")
					ratio("nodevol-cli", "rm-rf")
					ratio("nodevol-child", "rm-rf")
					ratio("nodevol", "floor")
					ratio("rm-rf", "floor")
					ratio("floor-go", "floor")
					if shape == "nested" {
						ratio("nodevol-workers=2", "rm-rf")
					}
				})
			}
		}
	}
}

// runChild removes root with RemoveAll in a child process (benchChild).
func runChild(root string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), benchChildEnv+"="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("child RemoveAll %s: %v: %s", root, err, out)
	}
	return nil
}

// runQuiet runs a command and returns its failure with what it printed.
func runQuiet(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// A remover is one way of removing a tree: prepare runs untimed and returns
// the timed removal.
type remover struct {
	name    string
	prepare func(root string) (func() error, error)
}

// removeRound builds one tree per remover, one at a time (six trees of a
// million files would not fit the images' inodes), each just before its
// remover runs, and appends each remover's time to took. round rotates
// which remover goes first.
func removeRound(b *testing.B, base, shape string, n, round int, removers []remover, took [][]time.Duration) {
	for k := range removers {
		i := (k + round) % len(removers)
		root := filepath.Join(base, fmt.Sprintf("r%d-%d", round, i))
		makeShape(b, root, shape, n)
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
		if _, err := os.Lstat(root); !os.IsNotExist(err) {
			b.Fatalf("%s left %s behind (%v)", removers[i].name, root, err)
		}
	}
}

type benchFS struct{ name, dir string }

// interleavedFilesystems returns a tmpfs and, as root in a private mount
// namespace, ext4 and XFS (when mkfs.xfs is installed) on loop images held
// in memory, each with inodes for maxFiles files and their directories.
func interleavedFilesystems(b *testing.B, maxFiles int) []benchFS {
	fss := []benchFS{{"tmpfs", mounttest.MemTempDir(b)}}
	if os.Geteuid() != 0 || !mounttest.InPrivateNamespace() {
		b.Logf("ext4 and XFS skipped: they need root in a private mount namespace")
		return fss
	}
	size := max(int64(4<<30), int64(maxFiles)*8<<10) // sparse: only what is written takes memory
	loop := func(fstype string, mkfsArgs ...string) {
		if _, err := exec.LookPath("mkfs." + fstype); err != nil {
			b.Logf("%s skipped: mkfs.%s is not installed (apt-get install -y xfsprogs)", fstype, fstype)
			return
		}
		img := filepath.Join(mounttest.MemTempDir(b), fstype+".img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Truncate(img, size); err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command("mkfs."+fstype, append(mkfsArgs, img)...).CombinedOutput(); err != nil {
			b.Fatalf("mkfs.%s: %v\n%s", fstype, err, out)
		}
		mnt, err := mounttest.MountLoop(b, img, fstype, "")
		if err != nil {
			b.Fatal(err)
		}
		fss = append(fss, benchFS{fstype + "-loop", mnt})
	}
	// Two inodes per 8 KiB: room for a million files and their directories.
	loop("ext4", "-q", "-F", "-i", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0")
	loop("xfs", "-q", "-f")
	return fss
}

// makeShape builds the tree of one shape with n files under root.
func makeShape(b *testing.B, root, shape string, n int) {
	b.Helper()
	if shape == "flat" {
		makeFlatDir(b, root, n)
		return
	}
	leaves := n / 100
	fan := int(math.Ceil(math.Sqrt(float64(leaves))))
	for j := range leaves {
		makeFlatDir(b, filepath.Join(root, fmt.Sprintf("d%03d", j/fan), fmt.Sprintf("e%03d", j%fan)), 100)
	}
}

// floorTree is a tree listed beforehand for the floor removers: every
// directory open, its entries sorted by inode, in post-order (a directory
// after everything in it).
type floorTree struct {
	root string
	dirs []floorDir
}

type floorDir struct {
	fd      int
	entries []floorEntry
}

type floorEntry struct {
	ino   uint64
	name  []byte // NUL-terminated
	flags int    // AT_REMOVEDIR for a directory
}

// listTree lists the tree under root, untimed (the removers' prepare).
func listTree(root string) (*floorTree, error) {
	t := &floorTree{root: root}
	var bufs [][]byte // one getdents buffer per depth: the listing recurses mid-batch
	var list func(fd, depth int) error
	list = func(fd, depth int) error {
		if depth == len(bufs) {
			bufs = append(bufs, make([]byte, 1<<20))
		}
		buf := bufs[depth]
		var entries []floorEntry
		for {
			n, err := unix.Getdents(fd, buf)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			for off := 0; off < n; {
				d, next, err := nextDirent(buf[:n], off)
				if err != nil {
					return err
				}
				off = next
				if isDotOrDotDot(d.name) {
					continue
				}
				e := floorEntry{ino: d.ino, name: append(slices.Clip(d.name), 0)}
				if d.typ == unix.DT_DIR {
					e.flags = unix.AT_REMOVEDIR
					sub, err := unix.Openat(fd, string(d.name), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
					if err != nil {
						return err
					}
					if err := list(sub, depth+1); err != nil {
						unix.Close(sub)
						return err
					}
				}
				entries = append(entries, e)
			}
		}
		slices.SortFunc(entries, func(a, b floorEntry) int { return cmp.Compare(a.ino, b.ino) })
		t.dirs = append(t.dirs, floorDir{fd, entries})
		return nil
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := list(fd, 0); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// close closes the directories still open.
func (t *floorTree) close() {
	for _, d := range t.dirs {
		if d.fd >= 0 {
			unix.Close(d.fd)
		}
	}
}

// remove removes the listed tree, each directory's entries (files, then
// its emptied subdirectories: they come before it) with unlinkDir, each
// directory closed once emptied, before its parent removes it (as a walk
// that keeps few descriptors does), and the root last.
func (t *floorTree) remove(unlinkDir func(d floorDir) error) error {
	defer t.close()
	for i, d := range t.dirs {
		if err := unlinkDir(d); err != nil {
			return err
		}
		if i < len(t.dirs)-1 {
			unix.Close(d.fd)
			t.dirs[i].fd = -1
		}
	}
	return unix.Rmdir(t.root)
}

// unlinkFloor lists the tree under root (untimed: prepare) and returns the
// timed part: each directory's entries unlinked in inode order relative to
// its descriptor. raw: through RawSyscall, the loop a C program runs;
// otherwise through unix.Syscall, the Go runtime's syscall path.
func unlinkFloor(root string, raw bool) (func() error, error) {
	t, err := listTree(root)
	if err != nil {
		return nil, err
	}
	call := unix.Syscall
	if raw {
		call = unix.RawSyscall
	}
	return func() error {
		return t.remove(func(d floorDir) error {
			for _, e := range d.entries {
				if _, _, errno := call(unix.SYS_UNLINKAT, uintptr(d.fd), uintptr(unsafe.Pointer(&e.name[0])), uintptr(e.flags)); errno != 0 {
					return fmt.Errorf("unlinkat %s: %w", e.name[:len(e.name)-1], errno)
				}
			}
			return nil
		})
	}, nil
}
