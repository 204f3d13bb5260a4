package emptydir

import (
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
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
