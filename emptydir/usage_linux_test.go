package emptydir

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
)

// TestUsageUpperBound: a Default volume holding more hard-linked files than
// the walk remembers is measured by a walk whose answer is an upper bound;
// Usage says so, and never counts less than the files' inodes.
func TestUsageUpperBound(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	mounttest.Tmpfs(t, root, "") // a private tmpfs: the files go with it
	e := newEnv(t, root, nil)
	m := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	u, err := e.plugin.Usage(testUID, "cache")
	if err != nil || u.Source != SourceWalk || u.UpperBound {
		t.Fatalf("Usage of an empty volume = %+v, %v; want an exact walk", u, err)
	}
	n := mountdetect.MaxHardLinkedInodes + 1000
	mounttest.LinkedFiles(t, m.Path(), n, 0)
	u, err = e.plugin.Usage(testUID, "cache")
	if err != nil || u.Source != SourceWalk || !u.UpperBound || u.Inodes < int64(n) {
		t.Errorf("Usage of a volume with %d hard-linked files = %+v, %v; want a walk, an upper bound, at least %d inodes", n, u, err, n)
	}
}

// TestUsageWalkMemoryLinearInDepth: Usage of a Default volume without a
// quota walks the tree with mountdetect.DiskUsage. A chain of D
// directories with long names (which the pod writes into its own volume;
// mkdirat relative to the previous one, so PATH_MAX does not limit it)
// must cost memory in proportion to the names, not to D²·len: a walk
// whose frames held each level's full path would hold ~180 MB at the
// bottom of 1,200 levels of 250-byte names, and ~28 GB at 15,000 levels
// (within the fd limit a kubelet runs with), so that the kubelet's
// periodic usage measurement ran out of memory. Each frame of the walk
// holds its own name and its parent, not its path.
func TestUsageWalkMemoryLinearInDepth(t *testing.T) {
	base := mounttest.MemTempDir(t)
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	vol := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache").Path()
	const depth = 1200
	name := strings.Repeat("d", 250)
	fd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	t.Cleanup(func() { _ = e.tearDown("cache") })

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	u, err := e.plugin.Usage(testUID, "cache")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("Usage = %+v; allocated %d bytes for a chain of %d directories (%d bytes of names)", u, got, depth, depth*len(name))
	if got > 32<<20 {
		t.Errorf("Usage allocated %d MiB walking %d KiB of attacker-written names: memory grows with the square of the depth", got>>20, depth*len(name)>>10)
	}
}
