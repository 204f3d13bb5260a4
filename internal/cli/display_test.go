//go:build linux

package cli

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

func TestDisplay(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1", "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1"},
		{"with spaces and 'quotes' \"too\"", "with spaces and 'quotes' \"too\""},
		{"naïve/日本語/ü", "naïve/日本語/ü"},
		{`back\slash`, `back\slash`},
		{"evil\nfake-row\t...", `evil\nfake-row\t...`},
		{"cr\rnul\x00bell\a", `cr\rnul\x00bell\a`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"del\x7f", `del\x7f`},
		{"c1\u0085", `c1\u0085`},
		{"line\u2028sep", `line\u2028sep`},
		{"rlo\u202eexe.txt", `rlo\u202eexe.txt`},
		{"nbsp\u00a0", `nbsp\u00a0`},
		{"bad\xffutf8\xc3", `bad\xffutf8\xc3`},
		{"replacement \ufffd kept", "replacement \ufffd kept"},
	} {
		if got := display(tc.in); got != tc.want {
			t.Errorf("display(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// wantNoControl fails when out has a control or format character other
// than the newline ending each line.
func wantNoControl(t *testing.T, what, out string) {
	t.Helper()
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		if i := strings.IndexFunc(line, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }); i >= 0 {
			t.Errorf("%s has a raw control character in line %q", what, line)
		}
	}
}

// Names found on disk cannot forge lines or rows in the human output: a
// volume directory named "evil\nfake-row\t..." is one row of the scan
// table, shown escaped (and so is a pod directory with such a name), and no command prints a raw control character.
// --json keeps the names as they are.
func TestHumanOutputEscapesNames(t *testing.T) {
	base := mounttest.RealTempDir(t)
	k := newKubelet(t, base)
	const evil = "evil\nfake-row\t...\x1b[2J"
	vol := k.dir(t, testUID2, "kubernetes.io/csi", evil)
	mounttest.Build(t, vol, "file data x")
	const evilPod = "pod\nfake\x1b[31m"
	mounttest.Build(t, filepath.Join(k.root, "pods", evilPod), "dir volumes/kubernetes.io~csi/v")
	badPlugin := filepath.Join(k.root, "pods", testUID2, "volumes", "bad\x1b[31m~x~y")
	mounttest.Build(t, badPlugin, "dir v") // a problem, listed with its error
	link := filepath.Join(base, "link\nto")
	mounttest.Build(t, base, "symlink "+filepath.Base(link)+" "+filepath.Join(base, "target\tthere"))
	before := mounttest.Snapshot(t, base)

	r := nodevol(t, "scan", "--root", k.root)
	wantNoControl(t, "scan", r.stdout)
	wantNoControl(t, "scan stderr", r.stderr)
	wantRow(t, r.stdout, testUID2, "kubernetes.io/csi", display(evil), "Default", "no", "0", "ok")
	wantRow(t, r.stdout, display(evilPod), "kubernetes.io/csi", "v", "Default", "no", "0", "ok")
	wantContains(t, "scan", r.stdout, "\n  "+display(badPlugin)+"\n    invalid plugin directory ")
	var rows int
	for line := range strings.Lines(r.stdout) {
		if line == "\n" {
			break // the table ends at the first blank line
		}
		rows++
	}
	if rows != 3 {
		t.Errorf("the table has %d lines, want the header and two rows:\n%s", rows, r.stdout)
	}

	r = nodevol(t, "scan", "--json", "--root", k.root)
	vols, _, _ := scanLines(t, r.stdout)
	if len(vols) != 2 || vols[0]["volume"] != evil || vols[1]["podUID"] != evilPod {
		t.Errorf("scan --json = %q; want the names as they are", vols)
	}

	for _, args := range [][]string{
		{"check", vol, link, vol + "\x1b[0m/missing"},
		{"rm", allowForeign, "--dry-run", vol, link, "relative\n"},
		{"teardown", allowForeign, "--dry-run", vol},
		{"usage", vol, vol + "\x07/missing"},
	} {
		r := nodevol(t, args...)
		wantNoControl(t, args[0]+" stdout", r.stdout)
		wantNoControl(t, args[0]+" stderr", r.stderr)
		wantContains(t, args[0]+" output", r.stdout+r.stderr, display(vol))
	}
	mounttest.Intact(t, base, before)
}

// A mount point inside a volume is named by whoever writes there: check,
// scan, rm and teardown show a mount named with a newline and an ANSI
// escape as mountdetect.Mount.String does, Go-quoted, never raw.
func TestHumanOutputEscapesMountNames(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.RealTempDir(t)
	k := newKubelet(t, base)
	vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
	const evil = "evil\nrefusing to remove /x: nothing\x1b[2J"
	nested := filepath.Join(vol, evil)
	mounttest.Build(t, vol, "dir "+evil)
	mounttest.Tmpfs(t, nested, "size=64k")
	want := strconv.Quote(nested)
	for _, args := range [][]string{
		{"check", vol},
		{"scan", "--root", k.root},
		{"rm", allowForeign, "--dry-run", vol},
		{"teardown", allowForeign, "--dry-run", vol},
		{"teardown", allowForeign, vol},
	} {
		r := nodevol(t, args...)
		wantNoControl(t, args[0]+" stdout", r.stdout)
		wantNoControl(t, args[0]+" stderr", r.stderr)
		wantContains(t, args[0]+" output", r.stdout+r.stderr, want)
	}
	if !mounttest.IsMountRoot(t, nested) {
		t.Error("the nested mount was unmounted")
	}
}
