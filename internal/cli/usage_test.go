//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
)

var usageKeys = []string{"path", "bytes", "inodes", "source", "projectID", "notCounted"}

func TestUsageWalk(t *testing.T) {
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a "+strings.Repeat("x", 20000), "file d/b y")
	if err := os.Link(filepath.Join(vol, "a"), filepath.Join(vol, "d/a-again")); err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, p := range []string{vol, filepath.Join(vol, "a"), filepath.Join(vol, "d"), filepath.Join(vol, "d/b")} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		want += st.Blocks * 512
	}
	r := nodevol(t, "usage", "--json", vol)
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, usageKeys...)
	if len(objs) != 1 || objs[0]["source"] != "walk" || objs[0]["inodes"] != float64(4) || objs[0]["bytes"] != float64(want) || objs[0]["projectID"] != float64(0) {
		t.Errorf("usage = %v; want a walk of 4 inodes (the hard link once), %d bytes, project 0", objs, want)
	}
	r = nodevol(t, "usage", vol)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "4 inodes", "source:     walk", "project ID: 0")

	r = nodevol(t, "usage", "--json", filepath.Join(base, "missing"), vol)
	r.wantCode(t, ExitError)
	lines := strings.SplitAfter(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || len(jsonLines(t, lines[0], withError(usageKeys)...)) != 1 || len(jsonLines(t, lines[1], usageKeys...)) != 1 {
		t.Errorf("want a line per path, the missing one with an error: %s", r.stdout)
	}
	nodevol(t, "usage").wantCode(t, ExitError)
}

// TestUsageProjectWithoutQuotas: on XFS a directory can carry a project ID
// even where the kernel accounts no quota (as on this CI kernel): usage
// reports the ID and falls back to the walk, saying why.
func TestUsageProjectWithoutQuotas(t *testing.T) {
	root := mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f")
	vol := filepath.Join(root, "vol")
	mounttest.Build(t, vol, "file a x")
	if err := fsquota.SetProjectID(vol, 1048577); err != nil {
		t.Fatal(err)
	}
	nas := filepath.Join(vol, "nas")
	mounttest.Tmpfs(t, nas, "")
	mounttest.Build(t, nas, "file big "+strings.Repeat("n", 50000))
	r := nodevol(t, "usage", vol)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "project ID: 1048577", "source:     walk (", "not counted: "+nas)
	r = nodevol(t, "usage", "--json", vol)
	objs := jsonLines(t, r.stdout, usageKeys...)
	if len(objs) != 1 || objs[0]["projectID"] != float64(1048577) || objs[0]["source"] != "walk" || objs[0]["bytes"].(float64) >= 50000 {
		t.Errorf("usage = %v; want project 1048577, a walk that skipped the tmpfs", objs)
	}
}

// TestUsageJSONListsMountsNotCounted: the walk does not count a mount
// beneath the directory (a NAS's data is not the volume's), and --json
// lists each such mount in notCounted, as the human output does on its
// "not counted:" lines; with none, notCounted is [].
func TestUsageJSONListsMountsNotCounted(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a x", "dir nas", "dir data")
	nas := filepath.Join(vol, "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	mounttest.Build(t, nas, "file big "+strings.Repeat("n", 50000))
	other := filepath.Join(base, "other")
	mounttest.Build(t, other, "file f y")
	mounttest.Bind(t, other, filepath.Join(vol, "data"))

	r := nodevol(t, "usage", vol)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "not counted: "+nas+" (another mount)", "not counted: "+filepath.Join(vol, "data")+" (another mount)")

	r = nodevol(t, "usage", "--json", vol, other)
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, usageKeys...)
	if len(objs) != 2 {
		t.Fatalf("usage --json = %s; want two objects", r.stdout)
	}
	var got []string
	for _, m := range objs[0]["notCounted"].([]any) {
		got = append(got, m.(string))
	}
	slices.Sort(got)
	if want := []string{filepath.Join(vol, "data"), nas}; !slices.Equal(got, want) {
		t.Errorf("notCounted = %#v; want %q, as the human output lists them", objs[0]["notCounted"], want)
	}
	if nc, ok := objs[1]["notCounted"].([]any); !ok || len(nc) != 0 {
		t.Errorf("notCounted of a directory with no mount beneath = %#v; want []", objs[1]["notCounted"])
	}
}

// TestUsageHelpSaysTheBound: the help of usage, a constant, names the
// bound of hard-linked files the walk remembers.
func TestUsageHelpSaysTheBound(t *testing.T) {
	if want := "past " + strconv.Itoa(mountdetect.MaxHardLinkedInodes) + " hard-linked files"; !strings.Contains(usageHelp, want) {
		t.Errorf("usage's help does not say %q:\n%s", want, usageHelp)
	}
}
