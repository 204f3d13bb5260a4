package fsat_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestMain runs the tests in a private mount namespace when root, so the
// mounts they make cannot leak.
func TestMain(m *testing.M) { mounttest.Main(m) }

// TestOpenDir runs each case with OpenDir's one-call openat2 path and with
// the walk one component at a time (fsat.SlowWalk): both must open the
// same directory, or fail with the same error.
func TestOpenDir(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mounts  bool // needs root
		prepare func(t *testing.T, root string)
		rel     string
		opts    []fsat.Option
		want    error // matched with errors.Is; nil: success
	}{
		{name: "directories", rel: "a/b/c", opts: []fsat.Option{fsat.SameMount}},
		{name: "directories, any mount", rel: "a/b/c"},
		{name: "one component", rel: "a", opts: []fsat.Option{fsat.SameMount}},
		{name: "missing", rel: "a/nosuch/c", opts: []fsat.Option{fsat.SameMount}, want: fs.ErrNotExist},
		{name: "symlink in the middle", rel: "a/link/c", opts: []fsat.Option{fsat.SameMount}, want: fsat.ErrSymlink,
			prepare: func(t *testing.T, root string) { mounttest.Build(t, root, "symlink a/link b") }},
		{name: "symlink last", rel: "a/link", want: fsat.ErrSymlink,
			prepare: func(t *testing.T, root string) { mounttest.Build(t, root, "symlink a/link b") }},
		{name: "symlink to outside", rel: "a/out/x", want: syscall.ELOOP,
			prepare: func(t *testing.T, root string) { mounttest.Build(t, root, "symlink a/out /") }},
		{name: "file", rel: "a/f/c", want: syscall.ENOTDIR,
			prepare: func(t *testing.T, root string) { mounttest.Build(t, root, "file a/f x") }},
		{name: "invalid", rel: "a/../a", want: fsat.ErrInvalidComponent},
		{name: "invalid: dot", rel: "a/./b", want: fsat.ErrInvalidComponent},
		{name: "invalid: dot dot last", rel: "a/..", want: fsat.ErrInvalidComponent},
		{name: "invalid: empty component", rel: "a//b", want: fsat.ErrInvalidComponent},
		{name: "invalid: trailing slash", rel: "a/b/", want: fsat.ErrInvalidComponent},
		{name: "invalid: absolute", rel: "/a", want: fsat.ErrInvalidComponent},
		{name: "invalid: NUL", rel: "a/b\x00c", want: fsat.ErrInvalidComponent},
		{name: "mount last", mounts: true, rel: "a/m", opts: []fsat.Option{fsat.SameMount}, want: fsat.ErrOtherMount,
			prepare: func(t *testing.T, root string) { mounttest.Tmpfs(t, filepath.Join(root, "a/m"), "size=64k") }},
		{name: "mount in the middle", mounts: true, rel: "a/m/x", opts: []fsat.Option{fsat.SameMount}, want: fsat.ErrOtherMount,
			prepare: func(t *testing.T, root string) {
				m := filepath.Join(root, "a/m")
				mounttest.Build(t, root, "dir a/m/x")
				mounttest.Tmpfs(t, m, "size=64k")
				mounttest.Build(t, m, "dir x")
			}},
		{name: "mount crossed without SameMount", mounts: true, rel: "a/m/x",
			prepare: func(t *testing.T, root string) {
				m := filepath.Join(root, "a/m")
				mounttest.Tmpfs(t, m, "size=64k")
				mounttest.Build(t, m, "dir x")
			}},
		{name: "bind mount of the same filesystem", mounts: true, rel: "a/bind/c", opts: []fsat.Option{fsat.SameMount}, want: fsat.ErrOtherMount,
			prepare: func(t *testing.T, root string) {
				mounttest.Build(t, root, "dir a/bind/c")
				mounttest.Bind(t, filepath.Join(root, "a/b"), filepath.Join(root, "a/bind"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mounts {
				mounttest.RequireMounts(t)
			}
			base := t.TempDir()
			mounttest.Build(t, base, "dir a/b/c")
			if tc.prepare != nil {
				tc.prepare(t, base)
			}
			root, err := fsat.OpenRoot(base)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			var errs [2]error
			for i, opts := range [][]fsat.Option{tc.opts, append([]fsat.Option{fsat.SlowWalk}, tc.opts...)} {
				d, err := root.OpenDir(tc.rel, opts...)
				errs[i] = err
				if tc.want == nil {
					if err != nil {
						t.Fatalf("OpenDir(%q, %v) = %v; want success", tc.rel, opts, err)
					}
					if got, want := d.Path(), filepath.Join(base, tc.rel); got != want {
						t.Errorf("OpenDir(%q, %v).Path() = %q; want %q", tc.rel, opts, got, want)
					}
					var st, want syscall.Stat_t
					if err := syscall.Fstat(d.Fd(), &st); err != nil {
						t.Fatal(err)
					}
					if err := syscall.Stat(filepath.Join(base, tc.rel), &want); err != nil {
						t.Fatal(err)
					}
					if st.Dev != want.Dev || st.Ino != want.Ino {
						t.Errorf("OpenDir(%q, %v) opened %d:%d; want %d:%d", tc.rel, opts, st.Dev, st.Ino, want.Dev, want.Ino)
					}
					d.Close()
					continue
				}
				if !errors.Is(err, tc.want) {
					t.Errorf("OpenDir(%q, %v) = %v; want an error matching %v", tc.rel, opts, err, tc.want)
				}
				d.Close()
			}
			if tc.want != nil && errs[0] != nil && errs[1] != nil && errs[0].Error() != errs[1].Error() {
				t.Errorf("OpenDir(%q) fails with %q in one call and %q component by component; want the same", tc.rel, errs[0], errs[1])
			}
		})
	}
}

// TestPathOfDirsOpenedBelowOthers: a Dir opened below another names
// itself by its parent's path and the components it was opened by,
// however deep the chain and whichever way each was opened, after its
// parents are closed too.
func TestPathOfDirsOpenedBelowOthers(t *testing.T) {
	dir := t.TempDir()
	mounttest.Build(t, dir, "dir a/b/c/d/e")
	root, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := root.OpenDir("a")
	if err != nil {
		t.Fatal(err)
	}
	bc, err := a.OpenDir("b/c", fsat.SameMount)
	if err != nil {
		t.Fatal(err)
	}
	d, err := bc.OpenDir("d", fsat.SlowWalk)
	if err != nil {
		t.Fatal(err)
	}
	e, err := d.OpenDir("e")
	if err != nil {
		t.Fatal(err)
	}
	self, err := e.OpenDir("")
	if err != nil {
		t.Fatal(err)
	}
	root.Close()
	a.Close()
	bc.Close()
	for _, c := range []struct {
		d    *fsat.Dir
		want string
	}{{a, "a"}, {bc, "a/b/c"}, {d, "a/b/c/d"}, {e, "a/b/c/d/e"}, {self, "a/b/c/d/e"}} {
		want := filepath.Join(dir, c.want)
		if got := c.d.Path(); got != want {
			t.Errorf("Path() = %q, want %q", got, want)
		}
		if got := c.d.Join("x"); got != want+"/x" {
			t.Errorf("Join(x) = %q, want %q", got, want+"/x")
		}
	}
	d.Close()
	e.Close()
	self.Close()
}
