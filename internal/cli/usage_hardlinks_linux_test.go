package cli

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
)

// TestUsageUpperBound: a directory with more hard-linked files than the
// walk remembers is reported as an upper bound, in text ("at most", and
// why) and in JSON ("upperBound": true, a key present only then).
func TestUsageUpperBound(t *testing.T) {
	mounttest.RequireMounts(t)
	vol := filepath.Join(mounttest.RealTempDir(t), "vol")
	mounttest.Tmpfs(t, vol, "") // a private tmpfs: the files go with it
	n := mountdetect.MaxHardLinkedInodes + 1000
	mounttest.LinkedFiles(t, vol, n, 0)
	r := nodevol(t, "usage", "--json", vol)
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, "path", "bytes", "inodes", "source", "projectID", "notCounted", "upperBound")
	if len(objs) != 1 || objs[0]["upperBound"] != true || objs[0]["source"] != "walk" || objs[0]["inodes"].(float64) < float64(n) {
		t.Errorf("usage --json of %d hard-linked files = %v; want a walk of at least %d inodes, upperBound true", n, objs, n)
	}
	r = nodevol(t, "usage", vol)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "used:       at most ", fmt.Sprintf("upper bound: more than %d hard-linked files", mountdetect.MaxHardLinkedInodes))
}
