package mountdetect

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
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
	var want, inodes int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(vol, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if !seen[st.Ino] {
			seen[st.Ino] = true
			want += st.Blocks * 512
			inodes++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
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
