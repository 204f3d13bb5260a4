package mountdetect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/base/errlist"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

// walkStrategies are the strategies RemoveAll can run with on this kernel;
// every RemoveAll case runs against each, serial and parallel.
func walkStrategies(t testing.TB) []strategy {
	var out []strategy
	for _, s := range supportedStrategies() {
		if s.walkSafe() {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		mounttest.Skip(t, "kernel has neither statx mount IDs nor openat2")
	}
	return out
}

type variant struct {
	s       strategy
	workers int
	maxOpen int
}

func (v variant) String() string { return fmt.Sprintf("%s/workers=%d", v.s, v.workers) }

func (v variant) opts() []Option {
	return []Option{Workers(v.workers), optionFunc(func(c *config) {
		c.strategy = v.s
		c.maxOpen = v.maxOpen
	})}
}

func variants(t testing.TB) []variant {
	var out []variant
	for _, s := range walkStrategies(t) {
		out = append(out, variant{s: s, workers: 1}, variant{s: s, workers: 4})
	}
	return out
}

func forEachVariant(t *testing.T, fn func(t *testing.T, v variant)) {
	for _, v := range variants(t) {
		t.Run(v.String(), func(t *testing.T) { fn(t, v) })
	}
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s still exists (lstat: %v)", path, err)
	}
}

func crossing(t *testing.T, err error) *CrossesMountError {
	t.Helper()
	if !errors.Is(err, ErrCrossesMount) {
		t.Fatalf("err = %v; want ErrCrossesMount", err)
	}
	var cm *CrossesMountError
	if !errors.As(err, &cm) {
		t.Fatalf("errors.As(%v, *CrossesMountError) = false", err)
	}
	return cm
}

func mountPoints(ms []Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.MountPoint)
	}
	slices.Sort(out)
	return out
}

func TestRemoveAllBadInput(t *testing.T) {
	root := t.TempDir()
	mounttest.Build(t, root, "file x/keep data", "file keep data")
	snap := mounttest.Snapshot(t, root)
	for _, p := range []string{
		"",
		"relative/path",
		"x",
		"/",
		"//",
		"/./",
		root + "/x/.",
		root + "/x/..",
		root + "/x/../",
		root + "/.",
		root + "/x\x00y",
	} {
		err := RemoveAll(p)
		if !errors.Is(err, ErrInvalidPath) {
			t.Errorf("RemoveAll(%q) = %v; want ErrInvalidPath", p, err)
		}
		var ipe *InvalidPathError
		if !errors.As(err, &ipe) || ipe.Path != p || ipe.Reason == "" {
			t.Errorf("RemoveAll(%q) = %#v; want *InvalidPathError naming the path with a reason", p, err)
		}
	}
	mounttest.Intact(t, root, snap)
}

// TestRemoveAllDotDotAnywhere: a ".." element is refused wherever it
// stands. After a symlink the kernel and filepath.Clean disagree:
// "a/link/../x" is outside/x to the kernel and a/x to Clean, so neither may
// be touched, whichever one RemoveAll would have acted on.
func TestRemoveAllDotDotAnywhere(t *testing.T) {
	base := t.TempDir()
	mounttest.Build(t, base, "file outside/x/keep kernel's x", "dir outside/deep", "file a/x/keep clean's x", "symlink a/link "+filepath.Join(base, "outside/deep"))
	snap := mounttest.Snapshot(t, base)
	for _, p := range []string{
		base + "/a/link/../x",
		base + "/a/link/../x/",
		base + "/a/../a/x",
		base + "/../" + filepath.Base(base) + "/a/x",
	} {
		for name, err := range map[string]error{"RemoveAll": RemoveAll(p), "ValidateRemovePath": ValidateRemovePath(p)} {
			var ipe *InvalidPathError
			if !errors.Is(err, ErrInvalidPath) || !errors.As(err, &ipe) || ipe.Path != p {
				t.Errorf("%s(%q) = %v; want *InvalidPathError naming the path", name, p, err)
				continue
			}
			if !strings.Contains(ipe.Reason, `".."`) || !strings.Contains(ipe.Reason, "symlink") {
				t.Errorf("%s(%q) reason %q; want it to say \"..\" is refused because of symlinks", name, p, ipe.Reason)
			}
		}
	}
	// A trailing "." or "..", as GNU rm refuses it, in its words.
	for _, p := range []string{base + "/a/x/..", base + "/a/link/..", "/..", base + "/a/.", ".", "./", "../"} {
		var ipe *InvalidPathError
		if err := RemoveAll(p); !errors.As(err, &ipe) || ipe.Reason != "refusing to remove '.' or '..' directory" {
			t.Errorf("RemoveAll(%q) = %v; want reason %q", p, err, "refusing to remove '.' or '..' directory")
		}
	}
	mounttest.Intact(t, base, snap)
}

func TestRemoveAllMissingIsSuccess(t *testing.T) {
	root := t.TempDir()
	forEachVariant(t, func(t *testing.T, v variant) {
		for _, p := range []string{
			filepath.Join(root, "missing"),
			filepath.Join(root, "missing/parent/too"),
		} {
			if err := RemoveAll(p, v.opts()...); err != nil {
				t.Errorf("RemoveAll(%q) = %v; want nil", p, err)
			}
		}
	})
}

func TestRemoveAllTreeWithSymlinksOut(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		snap := mounttest.Sentinels(t, outside)
		vol := filepath.Join(base, "pods/uid/volumes/kubernetes.io~empty-dir/cache")
		mounttest.Build(t, vol,
			"file a.txt hello",
			"file d1/d2/d3/f deep",
			"dir d1/empty",
			"symlink link-dir "+outside,
			"symlink d1/link-file "+filepath.Join(outside, "important.txt"),
			"symlink d1/d2/link-rel ../../../../../../../outside",
			"symlink dangling /nonexistent/x",
			"symlink root-link /",
		)
		if err := unix.Mkfifo(filepath.Join(vol, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(vol, "d1/d2"), 0o500); err != nil { // read-only dir: root's rmdir/unlink bypass, others fail
			t.Fatal(err)
		}
		if os.Geteuid() != 0 {
			os.Chmod(filepath.Join(vol, "d1/d2"), 0o755)
		}
		if err := RemoveAll(vol, v.opts()...); err != nil {
			t.Fatalf("RemoveAll(%q) = %v; want nil", vol, err)
		}
		mustNotExist(t, vol)
		mounttest.Intact(t, outside, snap)
		if _, err := os.Stat(filepath.Dir(vol)); err != nil {
			t.Errorf("parent of the removed directory is gone: %v", err)
		}
	})
}

func TestRemoveAllLastElementSymlink(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		snap := mounttest.Sentinels(t, outside)
		link := filepath.Join(base, "vol")
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		if err := RemoveAll(link, v.opts()...); err != nil {
			t.Fatalf("RemoveAll(%q) = %v; want nil", link, err)
		}
		mustNotExist(t, link)
		mounttest.Intact(t, outside, snap)
	})
}

func TestRemoveAllSingleFile(t *testing.T) {
	base := t.TempDir()
	f := filepath.Join(base, "f")
	mounttest.Build(t, base, "file f x")
	if err := RemoveAll(f); err != nil {
		t.Fatalf("RemoveAll(%q) = %v", f, err)
	}
	mustNotExist(t, f)
}

func TestRemoveAllSymlinkedParent(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		// /var/lib/kubelet -> /data/kubelet, as on many nodes.
		mounttest.Build(t, base, "file data/kubelet/pods/uid/volumes/v/file x", "symlink kubelet data/kubelet")
		vol := filepath.Join(base, "kubelet/pods/uid/volumes/v")
		if err := RemoveAll(vol, v.opts()...); err != nil {
			t.Fatalf("RemoveAll(%q) = %v", vol, err)
		}
		mustNotExist(t, filepath.Join(base, "data/kubelet/pods/uid/volumes/v"))
		if fi, err := os.Lstat(filepath.Join(base, "kubelet")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the symlinked parent was changed: %v %v", fi, err)
		}
	})
}

// deepTree builds a chain of depth directories (each name 10 bytes, so the
// path is far longer than PATH_MAX) using fd-relative calls, with a file at
// every level.
func deepTree(t testing.TB, root string, depth int) {
	t.Helper()
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range depth {
		name := fmt.Sprintf("d%09d", i)
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatalf("mkdirat at depth %d: %v", i, err)
		}
		ffd, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(ffd)
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = nfd
	}
	unix.Close(fd)
}

func TestRemoveAllDeeperThanPathMax(t *testing.T) {
	const depth = 1500 // 1500 × 11 bytes ≈ 16 KiB of path, four times PATH_MAX
	for _, v := range variants(t) {
		for _, maxOpen := range []int{0, 16} { // default window, and a small one forcing ".." reopens
			v.maxOpen = maxOpen
			t.Run(fmt.Sprintf("%s/maxOpen=%d", v, maxOpen), func(t *testing.T) {
				base := mounttest.MemTempDir(t)
				outside := filepath.Join(base, "outside")
				snap := mounttest.Sentinels(t, outside)
				root := filepath.Join(base, "deep")
				deepTree(t, root, depth)
				if err := RemoveAll(root, v.opts()...); err != nil {
					t.Fatalf("RemoveAll(deep tree) = %v", err)
				}
				mustNotExist(t, root)
				mounttest.Intact(t, outside, snap)
			})
		}
	}
}

func TestRemoveAllHugeDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping 100k-file directory in -short mode")
	}
	const n = 100_000
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			base := mounttest.MemTempDir(t)
			root := filepath.Join(base, "huge")
			makeFlatDir(t, root, n)
			outside := filepath.Join(base, "outside")
			snap := mounttest.Sentinels(t, outside)
			if err := RemoveAll(root, Workers(workers)); err != nil {
				t.Fatalf("RemoveAll(%d-file dir) = %v", n, err)
			}
			mustNotExist(t, root)
			mounttest.Intact(t, outside, snap)
		})
	}
}

func makeFlatDir(t testing.TB, dir string, n int) {
	t.Helper()
	makeFiles(t, dir, n, func(i int) string { return "file-" + fmt.Sprint(i) })
}

// makeFiles creates dir (and its parents) and n empty files in it, named
// by name(i).
func makeFiles(t testing.TB, dir string, n int, name func(i int) string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for i := range n {
		f, err := unix.Openat(fd, name(i), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
	}
}

// TestRemoveAllNestedMountsRefused covers invariant 3: a mount found
// beneath the directory before removal means nothing at all is deleted,
// and the error names every mount.
func TestRemoveAllNestedMountsRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	type tc struct {
		name string
		// prepare mounts things inside vol (and may use base for sources);
		// it returns the mount points RemoveAll must report.
		prepare func(t *testing.T, base, vol string) []string
	}
	cases := []tc{
		{"tmpfs", func(t *testing.T, base, vol string) []string {
			nas := filepath.Join(vol, "nas")
			mounttest.Tmpfs(t, nas, "size=1m")
			mounttest.Sentinels(t, nas)
			return []string{nas}
		}},
		{"same-fs bind of a directory", func(t *testing.T, base, vol string) []string {
			src := filepath.Join(base, "share")
			mounttest.Sentinels(t, src)
			dst := filepath.Join(vol, "a/b/share")
			mounttest.Bind(t, src, dst)
			return []string{dst}
		}},
		{"bind-mounted file", func(t *testing.T, base, vol string) []string {
			src := filepath.Join(base, "secret.conf")
			mounttest.Build(t, base, "file secret.conf do not delete me")
			dst := filepath.Join(vol, "etc/secret.conf")
			mounttest.Bind(t, src, dst)
			return []string{dst}
		}},
		{"hugetlbfs", func(t *testing.T, base, vol string) []string {
			hp := filepath.Join(vol, "hugepages")
			mounttest.Mount(t, "nodev", hp, "hugetlbfs", 0, "pagesize=2M")
			return []string{hp}
		}},
		{"several, one under another", func(t *testing.T, base, vol string) []string {
			a := filepath.Join(vol, "x/nas")
			mounttest.Tmpfs(t, a, "")
			b := filepath.Join(a, "inner")
			mounttest.Tmpfs(t, b, "")
			c := filepath.Join(vol, "y/z")
			mounttest.Tmpfs(t, c, "")
			return []string{a, b, c}
		}},
		{"the directory itself is a tmpfs mount", func(t *testing.T, base, vol string) []string {
			mounttest.Tmpfs(t, vol, "")
			mounttest.Build(t, vol, "file inside x")
			return []string{vol}
		}},
		{"the directory itself is a same-fs bind mount", func(t *testing.T, base, vol string) []string {
			src := filepath.Join(base, "bindsrc")
			mounttest.Sentinels(t, src)
			mounttest.Bind(t, src, vol)
			return []string{vol}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEachVariant(t, func(t *testing.T, v variant) {
				base := t.TempDir()
				vol := filepath.Join(base, "vol")
				mounttest.Build(t, vol, "file top.txt t", "file a/mid.txt m", "symlink out "+base)
				want := c.prepare(t, base, vol)
				before := mounttest.Snapshot(t, base)
				err := RemoveAll(vol, v.opts()...)
				cm := crossing(t, err)
				if cm.DuringWalk {
					t.Errorf("DuringWalk = true; want false (found before removal)")
				}
				if got := mountPoints(cm.Mounts); !slices.Equal(got, want) {
					t.Errorf("mounts = %q; want %q", got, want)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
				// Nothing deleted anywhere: the whole base, mounts included.
				mounttest.Intact(t, base, before)
			})
		})
	}
}

// TestRemoveAllMountAppearsBeforeOpen mounts a tmpfs on a directory just
// before the walk opens it: the walk must see another mount ID (or EXDEV)
// and not enter it.
func TestRemoveAllMountAppearsBeforeOpen(t *testing.T) {
	mounttest.RequireMounts(t)
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a/b/target/f x", "file a/sibling y", "file z z")
		target := filepath.Join(vol, "a/b/target")
		nas := filepath.Join(base, "nas")
		mounttest.Tmpfs(t, nas, "")
		snap := mounttest.Sentinels(t, nas)
		testHookBeforeEnter = func(p string) {
			if p == target {
				mounttest.Bind(t, nas, target)
			}
		}
		t.Cleanup(func() { testHookBeforeEnter = nil })
		err := RemoveAll(vol, v.opts()...)
		testHookBeforeEnter = nil
		cm := crossing(t, err)
		if !cm.DuringWalk {
			t.Errorf("DuringWalk = false; want true")
		}
		if got := mountPoints(cm.Mounts); !slices.Equal(got, []string{target}) {
			t.Errorf("mounts = %q; want [%s]", got, target)
		}
		if len(cm.Mounts) == 1 && cm.Mounts[0].FSType != "tmpfs" {
			t.Errorf("FSType = %q; want tmpfs", cm.Mounts[0].FSType)
		}
		mounttest.Intact(t, nas, snap)
		mounttest.Intact(t, target, snap)
		// Everything not on the path to the mount is gone.
		mustNotExist(t, filepath.Join(vol, "z"))
		mustNotExist(t, filepath.Join(vol, "a/sibling"))
	})
}

// TestRemoveAllMountAppearsAfterOpen mounts on a directory the walk has
// already opened: the fd keeps naming the covered directory, which is
// emptied; the mount itself is never entered, and its mount point is
// reported when rmdir meets EBUSY.
func TestRemoveAllMountAppearsAfterOpen(t *testing.T) {
	mounttest.RequireMounts(t)
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a/target/covered x", "file z z")
		target := filepath.Join(vol, "a/target")
		nas := filepath.Join(base, "nas")
		mounttest.Tmpfs(t, nas, "")
		snap := mounttest.Sentinels(t, nas)
		testHookAfterEnter = func(p string) {
			if p == target {
				mounttest.Bind(t, nas, target)
			}
		}
		t.Cleanup(func() { testHookAfterEnter = nil })
		err := RemoveAll(vol, v.opts()...)
		testHookAfterEnter = nil
		cm := crossing(t, err)
		if got := mountPoints(cm.Mounts); !slices.Equal(got, []string{target}) || !cm.DuringWalk {
			t.Errorf("mounts = %q, DuringWalk = %v; want [%s], true", got, cm.DuringWalk, target)
		}
		mounttest.Intact(t, nas, snap)
		mounttest.Intact(t, target, snap)
		// The covered directory's own file was on our mount and is gone.
		mounttest.Unmount(t, target)
		mustNotExist(t, filepath.Join(target, "covered"))
	})
}

// TestRemoveAllBindFileAppears bind-mounts a file over an entry of a
// directory the walk is about to list: unlink meets EBUSY and the file's
// data survives.
func TestRemoveAllBindFileAppears(t *testing.T) {
	mounttest.RequireMounts(t)
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file d/victim placeholder", "file d/other o", "file secret precious")
		victim := filepath.Join(vol, "d/victim")
		secret := filepath.Join(base, "secret")
		mounttest.Build(t, base, "file secret precious")
		testHookAfterEnter = func(p string) {
			if p == filepath.Join(vol, "d") {
				mounttest.Bind(t, secret, victim)
			}
		}
		t.Cleanup(func() { testHookAfterEnter = nil })
		err := RemoveAll(vol, v.opts()...)
		testHookAfterEnter = nil
		cm := crossing(t, err)
		if got := mountPoints(cm.Mounts); !slices.Equal(got, []string{victim}) {
			t.Errorf("mounts = %q; want [%s]", got, victim)
		}
		if b, err := os.ReadFile(secret); err != nil || string(b) != "precious" {
			t.Errorf("bind-mounted file source = %q, %v; want intact", b, err)
		}
		mustNotExist(t, filepath.Join(vol, "d/other"))
	})
}

// TestRemoveAllDirSwappedForSymlink replaces a directory with a symlink to
// an outside sentinel directory exactly between listing its parent and
// opening it.
func TestRemoveAllDirSwappedForSymlink(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		snap := mounttest.Sentinels(t, outside)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file d/f x", "file e/g y")
		d := filepath.Join(vol, "d")
		testHookBeforeEnter = func(p string) {
			if p == d {
				if err := os.Rename(d, filepath.Join(base, "moved")); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(outside, d); err != nil {
					t.Error(err)
				}
			}
		}
		t.Cleanup(func() { testHookBeforeEnter = nil })
		err := RemoveAll(vol, v.opts()...)
		testHookBeforeEnter = nil
		if err != nil {
			t.Fatalf("RemoveAll = %v; want nil", err)
		}
		mustNotExist(t, vol)
		mounttest.Intact(t, outside, snap)
	})
}

// TestRemoveAllOpenedDirMovedOut moves a directory the walk has opened out
// of the tree and puts a symlink to a sentinel in its place. The walk keeps
// working inside the directory it opened (its own, moved, content), never
// follows the symlink, and removes the symlink by name.
func TestRemoveAllOpenedDirMovedOut(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		snap := mounttest.Sentinels(t, outside)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file d/f x", "file d/sub/g y")
		d := filepath.Join(vol, "d")
		testHookAfterEnter = func(p string) {
			if p == d {
				if err := os.Rename(d, filepath.Join(base, "moved")); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(outside, d); err != nil {
					t.Error(err)
				}
			}
		}
		t.Cleanup(func() { testHookAfterEnter = nil })
		err := RemoveAll(vol, v.opts()...)
		testHookAfterEnter = nil
		if err != nil {
			t.Fatalf("RemoveAll = %v; want nil", err)
		}
		mustNotExist(t, vol)
		mounttest.Intact(t, outside, snap)
		// The documented limit: what the moved directory held when it was
		// moved is removed at its new place; the directory stays, empty.
		if names, err := os.ReadDir(filepath.Join(base, "moved")); err != nil || len(names) != 0 {
			t.Errorf("moved directory: entries %v, err %v; want it present and empty", names, err)
		}
	})
}

func TestRemoveAllImmutableFile(t *testing.T) {
	mounttest.RequireMounts(t) // CAP_LINUX_IMMUTABLE, and a tmpfs that supports the flag
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		mounttest.Tmpfs(t, base, "")
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a/locked x", "file a/free y", "file b/free z")
		locked := filepath.Join(vol, "a/locked")
		mounttest.SetImmutable(t, locked, true)
		t.Cleanup(func() { mounttest.SetImmutable(t, locked, false) })
		err := RemoveAll(vol, v.opts()...)
		// One failure is returned as itself, not wrapped in a join.
		pe, ok := err.(*os.PathError)
		if !ok || !errors.Is(err, unix.EPERM) || pe.Path != locked {
			t.Fatalf("RemoveAll = %#v; want the *os.PathError itself, EPERM naming %s", err, locked)
		}
		if errors.Is(err, ErrCrossesMount) {
			t.Errorf("an immutable file is not a mount: %v", err)
		}
		if _, err := os.Stat(locked); err != nil {
			t.Errorf("immutable file: %v", err)
		}
		mustNotExist(t, filepath.Join(vol, "a/free"))
		mustNotExist(t, filepath.Join(vol, "b"))
		mounttest.SetImmutable(t, locked, false)
		if err := RemoveAll(vol, v.opts()...); err != nil {
			t.Fatalf("second RemoveAll = %v", err)
		}
		mustNotExist(t, vol)
	})
}

// immutableTree builds n immutable files in vol, spread over directories
// (dir<i%3>/f<i>), plus free files, and returns the immutable paths sorted.
func immutableTree(t *testing.T, vol string, n int) []string {
	t.Helper()
	var locked []string
	for i := range n {
		rel := fmt.Sprintf("dir%d/f%03d", i%3, i)
		mounttest.Build(t, vol, "file "+rel+" locked", fmt.Sprintf("file dir%d/free%03d free", i%3, i))
		p := filepath.Join(vol, rel)
		mounttest.SetImmutable(t, p, true)
		t.Cleanup(func() { mounttest.SetImmutable(t, p, false) })
		locked = append(locked, p)
	}
	slices.Sort(locked)
	return locked
}

// joined returns the errors err joins, failing the test when it joins
// none.
func joined(t *testing.T, err error) []error {
	t.Helper()
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("RemoveAll = %#v; want several errors joined", err)
	}
	return j.Unwrap()
}

// TestRemoveAllReportsEveryError: every failure is reported, each its own
// *os.PathError reachable with errors.As, sorted by path whatever the
// order the (parallel) walk met them in.
func TestRemoveAllReportsEveryError(t *testing.T) {
	requireMounts(t) // CAP_LINUX_IMMUTABLE, and a tmpfs that supports the flag
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		mounttest.Tmpfs(t, base, "")
		vol := filepath.Join(base, "vol")
		locked := immutableTree(t, vol, 7)
		err := RemoveAll(vol, v.opts()...)
		errs := joined(t, err)
		var got []string
		for _, e := range errs {
			pe, ok := e.(*os.PathError)
			if !ok || pe.Err != unix.EPERM {
				t.Errorf("joined error %#v; want an *os.PathError with EPERM", e)
				continue
			}
			got = append(got, pe.Path)
		}
		if !slices.Equal(got, locked) {
			t.Errorf("errors name %q; want every immutable file, sorted: %q", got, locked)
		}
		for _, p := range locked {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error text does not name %s:\n%v", p, err)
			}
		}
		if strings.Contains(err.Error(), "more errors") {
			t.Errorf("error text counts errors instead of listing them:\n%v", err)
		}
		if !errors.Is(err, unix.EPERM) || errors.Is(err, ErrCrossesMount) {
			t.Errorf("errors.Is(EPERM) = %v, errors.Is(ErrCrossesMount) = %v; want true, false", errors.Is(err, unix.EPERM), errors.Is(err, ErrCrossesMount))
		}
		for _, p := range locked {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("immutable file: %v", err)
			}
			mustNotExist(t, strings.Replace(p, "/f", "/free", 1))
		}
	})
}

// TestRemoveAllErrorsCapped: past errlist.Max failures, the ones with the
// smallest paths are listed and a *MoreErrorsError counts the rest.
func TestRemoveAllErrorsCapped(t *testing.T) {
	requireMounts(t)
	const n = errlist.Max + 5
	forEachVariant(t, func(t *testing.T, v variant) {
		base := t.TempDir()
		mounttest.Tmpfs(t, base, "")
		vol := filepath.Join(base, "vol")
		locked := immutableTree(t, vol, n)
		err := RemoveAll(vol, v.opts()...)
		errs := joined(t, err)
		if len(errs) != errlist.Max+1 {
			t.Fatalf("RemoveAll joined %d errors; want %d and a count", len(errs), errlist.Max)
		}
		for i, e := range errs[:errlist.Max] {
			if pe, ok := e.(*os.PathError); !ok || pe.Path != locked[i] {
				t.Errorf("error %d = %v; want %s", i, e, locked[i])
			}
		}
		var more *MoreErrorsError
		if !errors.As(errs[errlist.Max], &more) || more.N != n-errlist.Max {
			t.Errorf("last error = %#v; want *MoreErrorsError{N: %d}", errs[errlist.Max], n-errlist.Max)
		}
		if want := fmt.Sprintf("and %d more errors", n-errlist.Max); !strings.HasSuffix(err.Error(), want) {
			t.Errorf("error text ends %q; want %q", err.Error()[max(0, len(err.Error())-40):], want)
		}
	})
}

// TestValidateRemovePathMatchesRemoveAll: ValidateRemovePath (used by dry
// runs) must refuse exactly what RemoveAll refuses, with the same message.
// Every path here is invalid or missing, so RemoveAll deletes nothing.
func TestValidateRemovePathMatchesRemoveAll(t *testing.T) {
	base := t.TempDir()
	for _, p := range []string{
		"", "rel", "./rel", "../rel", ".", "..",
		"/", "//", "///", "/.", "/..", "/../", "/./",
		base + "/missing/..", base + "/missing/../", base + "/missing/.", base + "/missing/./", base + "/missing/..//",
		base + "/missing", base + "/missing/", base + "//missing", base + "/./missing", base + "/x/../missing",
		base + "/mis\x00sing", base + "/..missing", base + "/missing..", base + "/.missing",
	} {
		valid := ValidateRemovePath(p)
		real := RemoveAll(p)
		if !errors.Is(real, ErrInvalidPath) {
			if real != nil {
				t.Fatalf("RemoveAll(%q) = %v; want nil (missing) or an invalid-path error", p, real)
			}
			if valid != nil {
				t.Errorf("ValidateRemovePath(%q) = %v; RemoveAll accepts it", p, valid)
			}
			continue
		}
		if valid == nil || valid.Error() != real.Error() {
			t.Errorf("ValidateRemovePath(%q) = %v; RemoveAll says %v", p, valid, real)
		}
	}
}

// removeAllWithin runs RemoveAll and panics (stopping the whole binary,
// whose goroutine dump shows where it spins) if it does not return in time:
// a test goroutine left looping would disturb every later test.
func removeAllWithin(t *testing.T, d time.Duration, path string, opts ...Option) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- RemoveAll(path, opts...) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		panic(fmt.Sprintf("%s: RemoveAll(%s) did not return within %v", t.Name(), path, d))
	}
}

// TestRemoveAllDeepKeptEntryTerminates: an entry that must stay (an
// immutable file, a mount that appears mid-walk) deeper than the fd window
// below some directory p. The walk evicts p's fd, and on the way back up
// reopens p through ".." — a new fd, listed again from offset 0, where the
// kept subtree reappeared: it was walked again, p evicted and reopened
// again, forever (and a mount was appended to the report on every round).
func TestRemoveAllDeepKeptEntryTerminates(t *testing.T) {
	mounttest.RequireMounts(t)
	chain := "p/s/d0/d1/d2/d3/d4/d5/d6/d7/d8/d9"
	for _, kind := range []string{"immutable file", "mount appears"} {
		t.Run(kind, func(t *testing.T) {
			forEachVariant(t, func(t *testing.T, v variant) {
				v.maxOpen = 4
				base := t.TempDir()
				mounttest.Tmpfs(t, base, "")
				vol := filepath.Join(base, "vol")
				deep := filepath.Join(vol, chain)
				mounttest.Build(t, vol, "file "+chain+"/free f", "file "+chain+"/locked/keep k", "file p/other o", "file top t")
				locked := filepath.Join(deep, "locked")
				nas := filepath.Join(base, "nas")
				var snap map[string]string
				if kind == "immutable file" {
					locked = filepath.Join(locked, "keep")
					mounttest.SetImmutable(t, locked, true)
					t.Cleanup(func() { mounttest.SetImmutable(t, locked, false) })
				} else {
					mounttest.Tmpfs(t, nas, "")
					snap = mounttest.Sentinels(t, nas)
					testHookBeforeEnter = func(p string) {
						if p == locked {
							mounttest.Bind(t, nas, locked)
						}
					}
					t.Cleanup(func() { testHookBeforeEnter = nil })
				}
				err := removeAllWithin(t, 20*time.Second, vol, v.opts()...)
				testHookBeforeEnter = nil
				if _, joined := err.(interface{ Unwrap() []error }); err == nil || joined {
					t.Errorf("RemoveAll = %v; want exactly one failure", err)
				}
				if kind == "immutable file" {
					if pe, ok := err.(*os.PathError); !ok || pe.Path != locked || !errors.Is(err, unix.EPERM) {
						t.Errorf("RemoveAll = %#v; want the *os.PathError itself, EPERM naming %s", err, locked)
					}
				} else {
					if _, ok := err.(*CrossesMountError); !ok {
						t.Errorf("RemoveAll = %#v; want the *CrossesMountError itself", err)
					}
					cm := crossing(t, err)
					if got := mountPoints(cm.Mounts); !slices.Equal(got, []string{locked}) || !cm.DuringWalk {
						t.Errorf("mounts = %q, DuringWalk = %v; want [%s] once, true", got, cm.DuringWalk, locked)
					}
					mounttest.Intact(t, nas, snap)
					mounttest.Intact(t, locked, snap)
				}
				for _, gone := range []string{"top", "p/other", chain + "/free"} {
					mustNotExist(t, filepath.Join(vol, gone))
				}
			})
		})
	}
}

// TestRemoveAllMountOnEvictedAncestor mounts on a directory whose fd the
// serial walk has evicted (the tree is deeper than the fd window). The walk
// reopens it through "..", which steps onto the new mount: that must be
// reported as a mount found during the walk, naming it, and not entered —
// not misreported as "moved" (tmpfs), nor walked into with every entry of
// the new mount reported as a mount of its own (a bind of the directory
// onto itself, same device and inode).
func TestRemoveAllMountOnEvictedAncestor(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, kind := range []string{"tmpfs", "self-bind"} {
		t.Run(kind, func(t *testing.T) {
			forEachVariant(t, func(t *testing.T, v variant) {
				v.maxOpen = 4
				base := t.TempDir()
				vol := filepath.Join(base, "vol")
				a := filepath.Join(vol, "a")
				chain := "a/b/d0/d1/d2/d3/d4/d5/d6/d7"
				mounttest.Build(t, vol, "file "+chain+"/f x", "file a/y/z z", "file top t")
				deepest := filepath.Join(vol, chain)
				var snap map[string]string
				testHookBeforeEnter = func(p string) {
					if p != deepest {
						return
					}
					mounttest.Build(t, a, "file zz/keep k")
					if kind == "tmpfs" {
						mounttest.Tmpfs(t, a, "")
						snap = mounttest.Sentinels(t, a)
					} else {
						mounttest.Bind(t, a, a)
					}
				}
				t.Cleanup(func() { testHookBeforeEnter = nil })
				err := removeAllWithin(t, 20*time.Second, vol, v.opts()...)
				testHookBeforeEnter = nil
				cm := crossing(t, err)
				if got := mountPoints(cm.Mounts); !slices.Equal(got, []string{a}) || !cm.DuringWalk {
					t.Errorf("mounts = %q, DuringWalk = %v; want [%s], true (err: %v)", got, cm.DuringWalk, a, err)
				}
				if snap != nil {
					mounttest.Intact(t, a, snap)
				}
				mustNotExist(t, filepath.Join(vol, "top"))
			})
		})
	}
}
