package mountdetect

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

func TestDiskUsage(t *testing.T) {
	base := t.TempDir()
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a "+strings.Repeat("a", 10000), "file d/b "+strings.Repeat("b", 5000), "symlink d/l /etc", "dir empty")
	if err := os.Link(filepath.Join(vol, "a"), filepath.Join(vol, "d/hard")); err != nil {
		t.Fatal(err)
	}
	// The expectation, computed independently with lstat (du's way).
	want, inodes := mounttest.LstatUsage(t, vol)
	for _, s := range walkStrategies(t) {
		u, err := diskUsage(vol, &config{strategy: s})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if u.Bytes != want || u.Inodes != inodes || inodes != 6 || want == 0 {
			t.Errorf("%s: DiskUsage = %+v; want %d bytes, %d inodes (6: vol, a, d, d/b, d/l, empty; d/hard is a)", s, u, want, inodes)
		}
	}
	if _, err := DiskUsage(filepath.Join(base, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing: %v", err)
	}

	t.Run("mounts are not counted", func(t *testing.T) {
		mounttest.RequireMounts(t)
		nas := filepath.Join(vol, "nas")
		mounttest.Tmpfs(t, nas, "")
		mounttest.Build(t, nas, "file big "+strings.Repeat("n", 100000))
		mounttest.Build(t, base, "file src "+strings.Repeat("s", 100000))
		mounttest.Bind(t, filepath.Join(base, "src"), filepath.Join(vol, "d/bound"))
		for _, s := range walkStrategies(t) {
			u, err := diskUsage(vol, &config{strategy: s})
			if err != nil {
				t.Fatal(err)
			}
			// The bind mount point file "d/bound" was created empty
			// beneath the mount; the covered file is not counted either.
			if u.Bytes != want || u.Inodes != inodes {
				t.Errorf("%s: DiskUsage = %+v; want %d bytes, %d inodes (mounts skipped)", s, u, want, inodes)
			}
			got := mountPoints(u.Skipped)
			if !slices.Equal(got, []string{filepath.Join(vol, "d/bound"), nas}) {
				t.Errorf("%s: skipped = %q", s, got)
			}
		}
	})
}

// TestDiskUsageBoundsFds: DiskUsage is RemoveAll's walk, so a tree deeper
// than its fd window is walked with at most maxOpen directory fds open,
// evicted directories are reopened through "..", and their listing resumes
// where it stopped: nothing is counted twice or missed.
func TestDiskUsageBoundsFds(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	const depth, maxOpen = 40, 4
	spec := []string{"dir top"}
	dir := ""
	for i := range depth {
		dir = filepath.Join(dir, fmt.Sprintf("d%02d", i))
		// Files before and after the subdirectory in listing order, and
		// a sibling directory, so that a level is listed on both sides of
		// its descent.
		spec = append(spec, "file "+dir+"/a x", "file "+dir+"/z "+strings.Repeat("z", 5000), "dir "+dir+"/sib")
	}
	mounttest.Build(t, vol, spec...)
	if err := os.Link(filepath.Join(vol, "d00/z"), filepath.Join(vol, dir, "hard")); err != nil {
		t.Fatal(err)
	}
	want, err := diskUsage(vol, &config{strategy: autoStrategy(), maxOpen: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// vol, top, and per level: the directory, a, z, sib (hard is d00/z).
	if wantInodes := int64(2 + 4*depth); want.Inodes != wantInodes {
		t.Fatalf("DiskUsage(%q) without eviction: Inodes = %d; want %d", vol, want.Inodes, wantInodes)
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	base, most := fds(), 0
	testHookAfterEnter = func(string) { most = max(most, fds()-base) }
	t.Cleanup(func() { testHookAfterEnter = nil })
	for _, s := range walkStrategies(t) {
		most = 0
		got, err := diskUsage(vol, &config{strategy: s, maxOpen: maxOpen})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if got.Bytes != want.Bytes || got.Inodes != want.Inodes || len(got.Skipped) != 0 {
			t.Errorf("%s: DiskUsage(%q) with maxOpen=%d = %+v; want %+v", s, vol, maxOpen, got, want)
		}
		// The walk's window, plus the fd just opened (not yet pushed) and
		// the one ReadDir used to count.
		if most > maxOpen+2 {
			t.Errorf("%s: DiskUsage(%q) with maxOpen=%d had %d fds open", s, vol, maxOpen, most)
		}
	}
}

// TestDiskUsageHardLinkCap: DiskUsage remembers at most maxLinked
// hard-linked inodes. Below the cap every inode counts once and the answer
// is exact; past it each link of an inode it could not remember counts in
// full, so the answer never falls short of the truth, and says that it is
// an upper bound.
func TestDiskUsageHardLinkCap(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 10
	mounttest.LinkedFiles(t, vol, n, 100)
	for _, s := range walkStrategies(t) {
		exact, err := diskUsage(vol, &config{strategy: s, maxLinked: n})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		// vol, d000 and the n files.
		if exact.Inodes != 2+n || exact.UpperBound || exact.Bytes == 0 {
			t.Fatalf("%s: DiskUsage(%q) remembering %d links = %+v; want %d inodes, exact", s, vol, n, exact, 2+n)
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(vol, "d000/f0"), &st); err != nil {
			t.Fatal(err)
		}
		for _, kept := range []int{1, 4, n - 1} {
			got, err := diskUsage(vol, &config{strategy: s, maxLinked: kept})
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			// Each file not remembered is counted at both of its links.
			twice := int64(n - kept)
			want := Usage{Bytes: exact.Bytes + twice*st.Blocks*512, Inodes: exact.Inodes + twice, UpperBound: true}
			if got.Bytes != want.Bytes || got.Inodes != want.Inodes || !got.UpperBound {
				t.Errorf("%s: DiskUsage(%q) remembering %d of %d hard-linked files = %+v; want %+v", s, vol, kept, n, got, want)
			}
		}
	}
}

// TestDiskUsageHardLinksBoundedMemory: to count a hard-linked file once,
// the walk remembers the inodes it met, at most MaxHardLinkedInodes of
// them (a table of 1 MiB): a pod that writes hard-linked files into its
// volume must not grow the memory of whoever measures it (the CSI driver,
// 128 MiB at most; a set of every inode would take some 50 MiB per
// million). With twice as many hard-linked files in the tree, the walk
// holds at most that table (and some slack) at its end, and the answer
// says it is an upper bound. On a private tmpfs.
func TestDiskUsageHardLinksBoundedMemory(t *testing.T) {
	mounttest.RequireMounts(t)
	vol := filepath.Join(t.TempDir(), "vol")
	mounttest.Tmpfs(t, vol, "")
	n := 2 * MaxHardLinkedInodes
	mounttest.LinkedFiles(t, vol, n, 0)
	held, u := heldByDiskUsage(t, vol, &config{strategy: autoStrategy()})
	if !u.UpperBound || u.Inodes < int64(n) {
		t.Errorf("DiskUsage over %d hard-linked files = %+v; want at least %d inodes, an upper bound", n, u, n)
	}
	most := uint64(3 << 19) // the 1 MiB table, and 512 KiB of slack
	if raceEnabled {
		most += direntBufSize // a listing buffer the pool dropped (see raceEnabled)
	}
	if held > most {
		t.Errorf("DiskUsage over %d hard-linked files held %.2f MiB of heap at the end of its walk; want at most %.1f MiB", n, float64(held)/(1<<20), float64(most)/(1<<20))
	}
	t.Logf("%d hard-linked files: %.2f MiB of heap held at the end of the walk", n, float64(held)/(1<<20))
}

// heldByDiskUsage runs diskUsage(dir, c) and returns how much more heap is
// live at the end of its walk (before it returns, what it keeps still
// held) than before it started, after a garbage collection each time. A
// walk of an empty directory first puts the walk's pooled buffers in place,
// so that they count on both sides.
func heldByDiskUsage(tb testing.TB, dir string, c *config) (uint64, Usage) {
	tb.Helper()
	if _, err := diskUsage(tb.TempDir(), &config{strategy: c.strategy}); err != nil {
		tb.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c.walked = func() {
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	u, err := diskUsage(dir, c)
	if err != nil {
		tb.Fatal(err)
	}
	if after.HeapAlloc < before.HeapAlloc {
		return 0, u
	}
	return after.HeapAlloc - before.HeapAlloc, u
}

// linksToFew makes files files under dir and n hard links to them, spread
// over subdirectories of at most 5,000 links: many links, few inodes.
func linksToFew(tb testing.TB, dir string, files, n int) {
	tb.Helper()
	mounttest.Build(tb, dir, "dir links")
	for i := range files {
		mounttest.Build(tb, dir, fmt.Sprintf("file f%d %s", i, strings.Repeat("x", 4096)))
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(dfd)
	const perDir = 5000
	for d := 0; d*perDir < n; d++ {
		sub := fmt.Sprintf("links/d%03d", d)
		if err := unix.Mkdirat(dfd, sub, 0o755); err != nil {
			tb.Fatal(err)
		}
		for i := d * perDir; i < min(n, (d+1)*perDir); i++ {
			if err := unix.Linkat(dfd, fmt.Sprintf("f%d", i%files), dfd, fmt.Sprintf("%s/l%d", sub, i), 0); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// BenchmarkDiskUsageHardLinks measures the heap DiskUsage holds at the
// end of its walk (held-MiB) and its time over hard links on a private
// tmpfs: a million files with two links each (a million distinct
// hard-linked inodes), and a million links to four files. "bounded" is
// DiskUsage; "unbounded" the same walk remembering every hard-linked
// inode (exact, memory in proportion to the tree); "du" is GNU du -s (what
// the kubelet runs for an emptyDir's usage), its peak RSS (as GNU time
// reports it) as held-MiB.
// NODEVOL_BENCH_LINKS sets the million.
//
//	go test -run '^$' -bench 'DiskUsageHardLinks' -benchtime 3x -timeout 1h ./mountdetect   # as root
func BenchmarkDiskUsageHardLinks(b *testing.B) {
	mounttest.RequireMounts(b)
	n := 1_000_000
	if s := os.Getenv("NODEVOL_BENCH_LINKS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("NODEVOL_BENCH_LINKS=%q: %v", s, err)
		}
	}
	base := filepath.Join(b.TempDir(), "tmpfs")
	mounttest.Tmpfs(b, base, "")
	shapes := []struct {
		name string
		make func(dir string)
	}{
		{fmt.Sprintf("files=%d/links=2", n), func(dir string) { mounttest.Build(b, dir, "dir ."); mounttest.LinkedFiles(b, dir, n, 0) }},
		{fmt.Sprintf("files=4/links=%d", n), func(dir string) { linksToFew(b, dir, 4, n) }},
	}
	du, duErr := exec.LookPath("du")
	timeCmd, timeErr := exec.LookPath("/usr/bin/time") // GNU time, for du's peak RSS
	for i, shape := range shapes {
		dir := filepath.Join(base, strconv.Itoa(i))
		shape.make(dir)
		for _, mode := range []struct {
			name      string
			maxLinked int
		}{{"bounded", 0}, {"unbounded", math.MaxInt}} {
			b.Run(shape.name+"/"+mode.name, func(b *testing.B) {
				var held uint64
				var u Usage
				for b.Loop() {
					h, got := heldByDiskUsage(b, dir, &config{strategy: autoStrategy(), maxLinked: mode.maxLinked})
					held, u = max(held, h), got
				}
				b.ReportMetric(float64(held)/(1<<20), "held-MiB")
				b.ReportMetric(float64(u.Inodes), "inodes")
				if u.UpperBound {
					b.ReportMetric(1, "upper-bound")
				}
			})
		}
		b.Run(shape.name+"/du", func(b *testing.B) {
			if duErr != nil || timeErr != nil {
				b.Skip(duErr, timeErr)
			}
			var rss int64
			for b.Loop() {
				// GNU time reports du's own peak RSS; du's rusage seen from
				// here would include this process's (os/exec starts
				// programs with CLONE_VM, and Linux carries the parent's
				// peak across the exec).
				out, err := exec.Command(timeCmd, "-f", "%M", du, "-s", "-x", "-B1", dir).CombinedOutput()
				if err != nil {
					b.Fatalf("du: %v\n%s", err, out)
				}
				lines := strings.Fields(string(out))
				kib, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
				if err != nil {
					b.Fatalf("time -f %%M: %v\n%s", err, out)
				}
				rss = max(rss, kib)
			}
			b.ReportMetric(float64(rss)/1024, "held-MiB")
		})
	}
}

// TestInoSet: the set agrees with a map over inode numbers that come in
// order (tmpfs), scattered, and with 0, across the table's growth.
func TestInoSet(t *testing.T) {
	var s inoSet
	ref := map[uint64]bool{}
	keys := []uint64{0, 1, 1 << 63, ^uint64(0)}
	for i := range uint64(5000) {
		keys = append(keys, i+2, i*0x9e3779b97f4a7c15, i<<20)
	}
	for _, k := range keys {
		if got := s.has(k); got != ref[k] {
			t.Fatalf("has(%d) = %v before insert; want %v", k, got, ref[k])
		}
		if !ref[k] {
			s.insert(k)
			ref[k] = true
		}
		if !s.has(k) {
			t.Fatalf("has(%d) = false after insert", k)
		}
	}
	if s.len() != len(ref) {
		t.Errorf("len() = %d; want %d", s.len(), len(ref))
	}
	for k := range ref {
		if !s.has(k) || s.has(k+1) != ref[k+1] {
			t.Fatalf("after all inserts: has(%d) = %v, has(%d) = %v; want true, %v", k, s.has(k), k+1, s.has(k+1), ref[k+1])
		}
	}
	if n := MaxHardLinkedInodes; n*4 > (1<<17)*3 {
		t.Errorf("MaxHardLinkedInodes = %d does not fit a table of 2^17 slots at 3/4", n)
	}
}
