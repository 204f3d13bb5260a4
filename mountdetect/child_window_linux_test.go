package mountdetect

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestChildFindsWhatMountsAtFileFindsThroughEveryParent: Child, which
// searches only where a Parent's window says its entries' mounts can be,
// answers what DetectFile and MountsAtFile answer of the directory open,
// whichever way the Parent was come by: read on the directory, on its
// pods directory and taken Beneath in one step or several, Beneath(""),
// read with another table or none, read through a second bind mount of
// a subdirectory. The mounts: stacked on an entry, inside those, made
// through either bind mount, on siblings whose names sort between "dir"
// and "dir/", and on names beside the parent's own that sort between it
// and it followed by "/".
func TestChildFindsWhatMountsAtFileFindsThroughEveryParent(t *testing.T) {
	requireMounts(t)
	base := t.TempDir()
	mounttest.Tmpfs(t, base, "")
	names := []string{"dir", "dir-2", "dir.x", "dir\x01", "dir0", "dira", "di", "plain"}
	var specs []string
	for _, name := range names {
		specs = append(specs, "dir src/pods/uid/volumes/plug/"+name+"/inner")
	}
	// Beside the parent and its ancestors: names sorting between each and
	// it followed by "/".
	for _, side := range []string{"src/pods/uid/volumes/plug-2", "src/pods/uid/volumes/plug.x", "src/pods/uid-2/volumes/plug", "src/pods/uid.0", "src/pods/uid/volumes-2"} {
		specs = append(specs, "dir "+side+"/m")
	}
	mounttest.Build(t, base, specs...)
	tab0, err := ReadMountTable() // before any mount below: another table
	if err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, filepath.Join(base, "src"), filepath.Join(base, "view"))
	if err := os.Mkdir(filepath.Join(base, "uidview"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, filepath.Join(base, "src/pods/uid"), filepath.Join(base, "uidview"))
	plug := filepath.Join(base, "view/pods/uid/volumes/plug")
	for _, name := range names[1:6] {
		mounttest.Tmpfs(t, filepath.Join(plug, name, "inner"), "")
	}
	for _, side := range []string{"view/pods/uid/volumes/plug-2", "view/pods/uid/volumes/plug.x", "src/pods/uid-2/volumes/plug", "view/pods/uid.0", "uidview/volumes-2"} {
		mounttest.Tmpfs(t, filepath.Join(base, side, "m"), "")
	}
	// Stacked three deep on dir/inner, a mount inside the top one.
	for range 3 {
		mounttest.Tmpfs(t, filepath.Join(plug, "dir/inner"), "")
	}
	if err := os.Mkdir(filepath.Join(plug, "dir/inner/deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(plug, "dir/inner/deep"), "")
	// Through the first mount, through the bind of the pod directory.
	mounttest.Tmpfs(t, filepath.Join(base, "src/pods/uid/volumes/plug/plain/inner"), "")
	for _, other := range []string{"src/pods/uid/volumes/plug/dir/other", "uidview/volumes/plug/dir/viewed"} {
		if err := os.Mkdir(filepath.Join(base, other), 0o755); err != nil {
			t.Fatal(err)
		}
		mounttest.Tmpfs(t, filepath.Join(base, other), "")
	}
	tab, err := ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	read := func(tab *MountTable, path string) *Parent {
		p, err := tab.Parent(openDirFd(t, path, unix.O_RDONLY), path)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	by := func(p Parent) *Parent { return &p }
	pods := filepath.Join(base, "view/pods")
	podsParent := read(tab, pods)
	plugParent := read(tab, plug)
	uidParent := read(tab, filepath.Join(base, "uidview"))
	viewPlug := filepath.Join(base, "uidview/volumes/plug")
	type parent struct {
		how  string
		p    *Parent
		path string // the directory p stands for
	}
	parents := []parent{
		{"Parent", plugParent, plug},
		{"Beneath", by(podsParent.Beneath("uid/volumes/plug")), plug},
		{"Beneath in three steps", by(by(by(podsParent.Beneath("uid")).Beneath("volumes")).Beneath("plug")), plug},
		{"Beneath in two steps", by(by(podsParent.Beneath("uid/volumes")).Beneath("plug")), plug},
		{"Beneath empty of Parent", by(plugParent.Beneath("")), plug},
		{"Beneath empty of Beneath", by(by(podsParent.Beneath("uid/volumes/plug")).Beneath("")), plug},
		{"Beneath of Beneath empty", by(by(podsParent.Beneath("")).Beneath("uid/volumes/plug")), plug},
		{"Parent of another table", read(tab0, plug), plug},
		{"Beneath of another table", by(read(tab0, pods).Beneath("uid/volumes/plug")), plug},
		{"Parent of no table", read(nil, plug), plug},
		{"Parent through the second bind", read(tab, viewPlug), viewPlug},
		{"Beneath through the second bind", by(uidParent.Beneath("volumes/plug")), viewPlug},
	}
	for _, pa := range parents {
		dirfd := openDirFd(t, pa.path, unix.O_RDONLY)
		for _, name := range names {
			beneath, ok := childAsFile(t, tab, pa.how, pa.p, dirfd, pa.path, name)
			if !ok {
				t.Fatalf("%s: Child(%q) cannot answer", pa.how, name)
			}
			// dir: inner three times, inner/deep, other, viewed.
			want := map[string]int{"dir": 6, "dir-2": 1, "dir.x": 1, "dir\x01": 1, "dir0": 1, "dira": 1, "plain": 1}[name]
			if len(beneath) != want {
				t.Errorf("%s: Child(%q) found %q beneath, want %d mounts", pa.how, name, mountPoints(beneath), want)
			}
		}
	}
}

// TestChildOfTheRootDirectory: a Parent read on "/" (the kernel names it
// "/", Parent keeps "") and one Beneath("") of it answer each directory
// of "/" on its mount as MountsAtFile does: every mount point in the
// table is beneath it.
func TestChildOfTheRootDirectory(t *testing.T) {
	requireMounts(t)
	// A mount beneath a directory of "/" on the root mount, whichever.
	rootfd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootfd)
	dir := t.TempDir()
	if e, err := LookAt(rootfd, "tmp", "/tmp", LookOnly); err == nil && !e.Root {
		// /tmp is on the root mount: the test's mounts are beneath it.
		mounttest.Tmpfs(t, dir, "")
	}
	tab, err := ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	root, err := tab.Parent(rootfd, "/")
	if err != nil {
		t.Fatal(err)
	}
	beneath := root.Beneath("")
	names, err := os.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range names {
		for how, p := range map[string]*Parent{"Parent": root, "Beneath": &beneath} {
			if _, ok := childAsFile(t, tab, how, p, rootfd, "/", d.Name()); ok {
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no directory of / on its mount: the test tests nothing")
	}
}
