package mountdetect

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// shortWords is every string of up to n bytes from '/', the bytes on
// either side of it ('.', '0'), a letter and the extreme bytes 0x00 and
// 0xff.
func shortWords(n int) []string {
	alphabet := []byte{'/', '.', '0', 'a', 0x00, 0xff}
	words := []string{""}
	for k, from := 0, 0; k < n; k++ {
		to := len(words)
		for _, w := range words[from:to] {
			for _, c := range alphabet {
				words = append(words, w+string(c))
			}
		}
		from = to
	}
	return words
}

// splits is every joinedPath that w is: w whole, and w cut at any of its
// slashes into up to four parts, every part after the first non-empty.
func splits(w string) []joinedPath {
	out := []joinedPath{pathOf(w)}
	for i := 1; i < len(w); i++ {
		if w[i-1] != '/' {
			continue
		}
		for _, head := range splits(w[:i-1]) {
			if head.n < len(head.parts) {
				out = append(out, head.join(w[i:]))
			}
		}
	}
	return out
}

// TestJoinedPathEveryShortPath: a joinedPath's comparisons, cut and
// rebasing say what the same operations say of the path it stands for,
// for every path of up to four bytes split every way at its slashes
// against every string of up to four bytes: names that sort between a
// directory and its slash ("dir-2", "dir.x", bytes below '/'), repeated
// and trailing slashes, the root.
func TestJoinedPathEveryShortPath(t *testing.T) {
	words := shortWords(4)
	bad := 0
	fail := func(format string, args ...any) {
		if bad++; bad < 20 {
			t.Errorf(format, args...)
		}
	}
	split := 0
	for _, w := range words {
		for _, p := range splits(w) {
			if p.n > 1 {
				split++
			}
			if got := p.String(); got != w {
				fail("%q split as %q is %q", w, p.parts[:p.n], got)
			}
			if got, want := p.trimSlash(), strings.TrimSuffix(w, "/"); got.String() != want {
				fail("%q.trimSlash() = %q, want %q", p.parts[:p.n], got.String(), want)
			}
			for _, s := range words {
				if got, want := p.compare(s), strings.Compare(s, w); got != want {
					fail("%q.compare(%q) = %d, want %d", p.parts[:p.n], s, got, want)
				}
				if got, want := p.compareWithDir(s), compareWithDir(s, w); got != want {
					fail("%q.compareWithDir(%q) = %d, want %d", p.parts[:p.n], s, got, want)
				}
				if got, want := p.isBeneath(s), isBeneath(s, w); got != want {
					fail("%q.isBeneath(%q) = %v, want %v", p.parts[:p.n], s, got, want)
				}
				_, want := cutDir(s, w)
				if got := p.holds(s); got != want {
					fail("%q.holds(%q) = %v, want %v", p.parts[:p.n], s, got, want)
				}
				if s == "" {
					continue // no mount point
				}
				rest, ok := p.cutDir(s)
				wantRest, wantOK := cutDir(w, s)
				if ok != wantOK || ok && rest.String() != wantRest {
					fail("%q.cutDir(%q) = %q, %v; want %q, %v", p.parts[:p.n], s, rest.String(), ok, wantRest, wantOK)
				}
				if !ok {
					continue
				}
				// The rest beneath the root of a mount: s itself, a
				// longer one.
				for _, root := range []string{s, "/r/0"} {
					if root == "/" {
						continue // position keeps the rest as it is
					}
					under := rest.under(root)
					if got, want := under.String(), root+wantRest; got != want {
						fail("%q.under(%q) = %q, want %q", rest.parts[:rest.n], root, got, want)
					}
					for _, part := range under.parts[1:under.n] {
						if part == "" {
							fail("%q.under(%q) = %q: an empty part after the first", rest.parts[:rest.n], root, under.parts[:under.n])
						}
					}
				}
			}
		}
	}
	if split < 100 {
		t.Fatalf("only %d paths split: the test tests little", split)
	}
}

// TestChildAnswersAsFile: Child, which compares the entry's path with
// the table's mount points without building it, finds what MountsAtFile
// and DetectFile find of the directory open: for a Parent and one
// Beneath it, on a bind mount of a subdirectory (the table gives its
// mount a root other than "/"), with mounts beneath the entry by path,
// inside those, by position (plain/inner and dir/other, made through
// the other mount of the filesystem), and beside it on names that sort
// between "dir" and "dir/", by path and by position: "dir-2/inner" sorts
// between "dir" and "dir/other", which a search for the first position
// not before "dir" missed.
func TestChildAnswersAsFile(t *testing.T) {
	requireMounts(t)
	base := t.TempDir()
	mounttest.Tmpfs(t, base, "")
	names := []string{"dir", "dir-2", "dir.x", "dir\x01", "dir0", "dira", "di", "plain"}
	var specs []string
	for _, name := range names {
		specs = append(specs, "dir src/pods/uid/volumes/plug/"+name+"/inner")
	}
	mounttest.Build(t, base, specs...)
	mounttest.Bind(t, filepath.Join(base, "src"), filepath.Join(base, "view"))
	plug := filepath.Join(base, "view/pods/uid/volumes/plug")
	for _, name := range names[1:6] {
		mounttest.Tmpfs(t, filepath.Join(plug, name, "inner"), "")
	}
	mounttest.Tmpfs(t, filepath.Join(plug, "dir/inner"), "")
	mounttest.Tmpfs(t, filepath.Join(plug, "dir/inner"), "")
	if err := os.Mkdir(filepath.Join(plug, "dir/inner/deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(plug, "dir/inner/deep"), "")
	mounttest.Tmpfs(t, filepath.Join(base, "src/pods/uid/volumes/plug/plain/inner"), "")
	if err := os.Mkdir(filepath.Join(base, "src/pods/uid/volumes/plug/dir/other"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(base, "src/pods/uid/volumes/plug/dir/other"), "")
	tab, err := ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	pods := filepath.Join(base, "view/pods")
	podsParent, err := tab.Parent(openDirFd(t, pods, unix.O_RDONLY), pods)
	if err != nil {
		t.Fatal(err)
	}
	plugParent, err := tab.Parent(openDirFd(t, plug, unix.O_RDONLY), plug)
	if err != nil {
		t.Fatal(err)
	}
	plugfd := openDirFd(t, plug, unix.O_RDONLY)
	beneath := podsParent.Beneath("uid/volumes/plug")
	parents := map[string]*Parent{"Parent": plugParent, "Beneath": &beneath}
	for how, parent := range parents {
		for _, name := range names {
			beneath, ok := childAsFile(t, tab, how, parent, plugfd, plug, name)
			if !ok {
				t.Fatalf("%s: Child(%q) cannot answer", how, name)
			}
			// dir: inner twice, inner/deep, other; none beside it.
			want := map[string]int{"dir": 4, "dir-2": 1, "dir.x": 1, "dir\x01": 1, "dir0": 1, "dira": 1, "plain": 1}[name]
			if len(beneath) != want {
				t.Errorf("%s: Child(%q) found %q beneath, want %d mounts", how, name, mountPoints(beneath), want)
			}
		}
	}
}

// childAsFile checks that Child of p, for the entry name of the
// directory dir (open as dirfd), answers what DetectFile and
// MountsAtFile answer of the entry opened; how names p in errors. It
// returns the mounts Child found beneath the entry, and false when Child
// cannot answer (the entry is a mount root, on another mount, ...).
func childAsFile(t *testing.T, tab *MountTable, how string, p *Parent, dirfd int, dir, name string) ([]Mount, bool) {
	t.Helper()
	path := filepath.Join(dir, name)
	e, err := LookAt(dirfd, name, path, LookOnly)
	if err != nil {
		t.Fatal(err)
	}
	info, at, beneath, ok, err := tab.Child(p, e, name)
	if err != nil {
		t.Fatalf("%s: Child(%q): %v", how, name, err)
	}
	if !ok {
		return nil, false
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	wantInfo, err := tab.DetectFile(fd, path)
	if err != nil {
		t.Fatal(err)
	}
	wantAt, wantBeneath, err := tab.MountsAtFile(fd, path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(info, wantInfo) || !reflect.DeepEqual(at, wantAt) || !reflect.DeepEqual(beneath, wantBeneath) {
		t.Errorf("%s: Child(%q) = %+v, %q, %q; want DetectFile's and MountsAtFile's %+v, %q, %q", how, name, info, mountPoints(at), mountPoints(beneath), wantInfo, mountPoints(wantAt), mountPoints(wantBeneath))
	}
	return beneath, true
}
