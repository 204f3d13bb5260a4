package mountdetect

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestIsMountPoint runs one table against every strategy the kernel offers.
func TestIsMountPoint(t *testing.T) {
	type tc struct {
		name     string
		needRoot bool
		// prepare returns the path to ask about.
		prepare func(t *testing.T, base string) string
		want    bool
		// blindStdev marks cases the st_dev fallback cannot see: it must
		// then answer "not mounted, not sure" — never a confident no.
		blindStdev bool
	}
	cases := []tc{
		{name: "plain directory", prepare: func(t *testing.T, base string) string {
			mounttest.Build(t, base, "dir plain")
			return filepath.Join(base, "plain")
		}},
		{name: "plain file", prepare: func(t *testing.T, base string) string {
			mounttest.Build(t, base, "file f x")
			return filepath.Join(base, "f")
		}},
		{name: "root", want: true, prepare: func(*testing.T, string) string { return "/" }},
		{name: "proc", want: true, prepare: func(*testing.T, string) string { return "/proc" }},
		{name: "relative path of a plain dir", prepare: func(t *testing.T, base string) string {
			t.Chdir(base)
			mounttest.Build(t, base, "dir rel")
			return "rel"
		}},
		{name: "symlink to a mount point is not one", prepare: func(t *testing.T, base string) string {
			mounttest.Build(t, base, "symlink link /proc")
			return filepath.Join(base, "link")
		}},
		{name: "tmpfs", needRoot: true, want: true, prepare: func(t *testing.T, base string) string {
			p := filepath.Join(base, "tmpfs")
			mounttest.Tmpfs(t, p, "")
			return p
		}},
		{name: "directory inside a tmpfs", needRoot: true, prepare: func(t *testing.T, base string) string {
			p := filepath.Join(base, "tmpfs")
			mounttest.Tmpfs(t, p, "")
			mounttest.Build(t, p, "dir sub")
			return filepath.Join(p, "sub")
		}},
		{name: "same-filesystem bind mount", needRoot: true, want: true, blindStdev: true, prepare: func(t *testing.T, base string) string {
			mounttest.Build(t, base, "dir src/x")
			p := filepath.Join(base, "dst")
			mounttest.Bind(t, filepath.Join(base, "src"), p)
			return p
		}},
		{name: "bind-mounted file", needRoot: true, want: true, blindStdev: true, prepare: func(t *testing.T, base string) string {
			mounttest.Build(t, base, "file src.txt x")
			p := filepath.Join(base, "dst.txt")
			mounttest.Bind(t, filepath.Join(base, "src.txt"), p)
			return p
		}},
		{name: "mount point reached through a symlinked parent", needRoot: true, want: true, prepare: func(t *testing.T, base string) string {
			mounttest.Build(t, base, "dir data/kubelet/vol", "symlink kubelet data/kubelet")
			mounttest.Tmpfs(t, filepath.Join(base, "data/kubelet/vol"), "")
			return filepath.Join(base, "kubelet/vol")
		}},
		// The kernel resolves "link/.." to the parent of link's target and
		// follows "link/": IsMountPoint must answer about that, as Detect
		// does, not about the lexically cleaned path (once a confident
		// "no").
		{name: "dot-dot after a symlink", needRoot: true, want: true, prepare: func(t *testing.T, base string) string {
			mounttest.Tmpfs(t, filepath.Join(base, "mnt"), "")
			mounttest.Build(t, base, "dir mnt/sub", "symlink link mnt/sub")
			return filepath.Join(base, "link") + "/.."
		}},
		{name: "trailing slash follows a symlink", needRoot: true, want: true, prepare: func(t *testing.T, base string) string {
			mounttest.Tmpfs(t, filepath.Join(base, "mnt"), "")
			mounttest.Build(t, base, "symlink link mnt")
			return filepath.Join(base, "link") + "/"
		}},
		{name: "dot inside a mount root", needRoot: true, want: true, prepare: func(t *testing.T, base string) string {
			mounttest.Tmpfs(t, filepath.Join(base, "mnt"), "")
			mounttest.Build(t, base, "symlink link mnt")
			return filepath.Join(base, "link") + "/."
		}},
		{name: "dot-dot to a plain directory", prepare: func(t *testing.T, base string) string {
			mounttest.Build(t, base, "dir a/b")
			return filepath.Join(base, "a/b") + "/.."
		}},
		{name: "hugetlbfs", needRoot: true, want: true, prepare: func(t *testing.T, base string) string {
			p := filepath.Join(base, "hp")
			mounttest.Mount(t, "nodev", p, "hugetlbfs", 0, "pagesize=2M")
			return p
		}},
	}
	for _, s := range supportedStrategies() {
		t.Run(s.String(), func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if c.needRoot {
						mounttest.RequireMounts(t)
					}
					p := c.prepare(t, t.TempDir())
					mounted, sure, err := isMountPoint(p, s)
					if err != nil {
						t.Fatalf("isMountPoint(%q, %s) error: %v", p, s, err)
					}
					if s == strategyStdev && c.blindStdev {
						if mounted || sure {
							t.Errorf("isMountPoint(%q, st_dev) = %v, %v; want false, false (blind to bind mounts)", p, mounted, sure)
						}
						return
					}
					if s == strategyStdev && !c.want {
						// st_dev can never be sure of "not mounted" (a bind
						// mount of the same filesystem looks the same).
						if mounted {
							t.Errorf("isMountPoint(%q, st_dev) = true; want false", p)
						}
						return
					}
					if mounted != c.want || !sure {
						t.Errorf("isMountPoint(%q, %s) = %v, %v; want %v, true", p, s, mounted, sure, c.want)
					}
				})
			}
		})
	}
}

func TestIsMountPointErrors(t *testing.T) {
	if _, _, err := IsMountPoint(""); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("IsMountPoint(\"\") = %v; want ErrInvalidPath", err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, _, err := IsMountPoint(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("IsMountPoint(%q) = %v; want ErrNotExist", missing, err)
	}
}

func TestDetect(t *testing.T) {
	type tc struct {
		name      string
		needRoot  bool
		prepare   func(t *testing.T, base string) string
		fsType    string
		magic     uint32
		mountRoot bool
		pageSize  int64
	}
	cases := []tc{
		{name: "tmpfs mount root is Memory", needRoot: true, fsType: "tmpfs", magic: MagicTmpfs, mountRoot: true,
			prepare: func(t *testing.T, base string) string {
				p := filepath.Join(base, "m")
				mounttest.Tmpfs(t, p, "size=1m")
				return p
			}},
		{name: "directory inside tmpfs is Default", needRoot: true, fsType: "tmpfs", magic: MagicTmpfs,
			prepare: func(t *testing.T, base string) string {
				p := filepath.Join(base, "m")
				mounttest.Tmpfs(t, p, "")
				mounttest.Build(t, p, "dir sub")
				return filepath.Join(p, "sub")
			}},
		{name: "hugetlbfs 2M", needRoot: true, fsType: "hugetlbfs", magic: MagicHugetlbfs, mountRoot: true, pageSize: 2 << 20,
			prepare: func(t *testing.T, base string) string {
				p := filepath.Join(base, "hp")
				mounttest.Mount(t, "nodev", p, "hugetlbfs", 0, "pagesize=2M")
				return p
			}},
		{name: "hugetlbfs default page size", needRoot: true, fsType: "hugetlbfs", magic: MagicHugetlbfs, mountRoot: true, pageSize: 2 << 20,
			prepare: func(t *testing.T, base string) string {
				p := filepath.Join(base, "hp")
				mounttest.Mount(t, "nodev", p, "hugetlbfs", 0, "")
				return p
			}},
		{name: "tmpfs through a symlinked parent", needRoot: true, fsType: "tmpfs", magic: MagicTmpfs, mountRoot: true,
			prepare: func(t *testing.T, base string) string {
				mounttest.Build(t, base, "dir real/v", "symlink alias real")
				mounttest.Tmpfs(t, filepath.Join(base, "real/v"), "")
				return filepath.Join(base, "alias/v")
			}},
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if m, sure, _ := IsMountPoint("/dev/shm"); m && sure {
			cases = append(cases, tc{name: "/dev/shm without root", fsType: "tmpfs", magic: MagicTmpfs, mountRoot: true,
				prepare: func(*testing.T, string) string { return "/dev/shm" }})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.needRoot {
				mounttest.RequireMounts(t)
			}
			p := c.prepare(t, t.TempDir())
			info, err := Detect(p)
			if err != nil {
				t.Fatalf("Detect(%q) = %v", p, err)
			}
			if info.FSType != c.fsType || info.Magic != c.magic || info.MountPoint != c.mountRoot || !info.MountPointSure || info.HugePageSize != c.pageSize {
				t.Errorf("Detect(%q) = %+v; want fsType %s, magic 0x%x, mountPoint %v (sure), hugePageSize %d",
					p, info, c.fsType, c.magic, c.mountRoot, c.pageSize)
			}
		})
	}
}

func TestDetectMissing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope")
	if _, err := Detect(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Detect(%q) = %v; want ErrNotExist", p, err)
	}
}

func TestNestedMounts(t *testing.T) {
	base := t.TempDir()
	mounttest.Build(t, base, "file vol/a x")
	got, err := NestedMounts(filepath.Join(base, "vol"))
	if err != nil || len(got) != 0 {
		t.Fatalf("NestedMounts(plain) = %v, %v; want none", got, err)
	}

	t.Run("mounts", func(t *testing.T) {
		mounttest.RequireMounts(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, base, "file shared.txt s", "dir src", "symlink alias vol")
		mounttest.Tmpfs(t, filepath.Join(vol, "z-tmpfs"), "")
		mounttest.Bind(t, filepath.Join(base, "shared.txt"), filepath.Join(vol, "m/file"))
		mounttest.Bind(t, filepath.Join(base, "src"), filepath.Join(vol, "b/bind"))
		mounttest.Tmpfs(t, filepath.Join(base, "vol-sibling"), "") // not beneath vol: prefix "vol" is not a parent
		want := []string{filepath.Join(vol, "b/bind"), filepath.Join(vol, "m/file"), filepath.Join(vol, "z-tmpfs")}
		for _, p := range []string{vol, filepath.Join(base, "alias")} {
			got, err := NestedMounts(p)
			if err != nil {
				t.Fatalf("NestedMounts(%q) = %v", p, err)
			}
			if mp := mountPoints(got); !slices.Equal(mp, want) {
				t.Errorf("NestedMounts(%q) = %q; want %q", p, mp, want)
			}
			for _, m := range got {
				if m.FSType == "" || m.Source == "" {
					t.Errorf("mount %+v lacks fs type or source", m)
				}
			}
		}
		// The mount on vol itself is not "nested".
		mounttest.Tmpfs(t, filepath.Join(base, "self"), "")
		if got, err := NestedMounts(filepath.Join(base, "self")); err != nil || len(got) != 0 {
			t.Errorf("NestedMounts(mount root) = %v, %v; want none", got, err)
		}
	})
}

// Kernel's features are found by using them, and the automatic strategy
// is the best of them: each one reported works on another directory too.
func TestKernelFeatures(t *testing.T) {
	f := Kernel()
	t.Logf("Kernel() = %+v; automatic strategy %v", f, autoStrategy())
	if got := bestStrategy(f); got != autoStrategy() {
		t.Errorf("bestStrategy(Kernel()) = %v; the automatic strategy is %v", got, autoStrategy())
	}
	dir := t.TempDir()
	for _, c := range []struct {
		have bool
		mask int
	}{{f.StatxMountIDUnique, unix.STATX_MNT_ID_UNIQUE}, {f.StatxMountID, unix.STATX_MNT_ID}} {
		var sx unix.Statx_t
		err := unix.Statx(unix.AT_FDCWD, dir, 0, c.mask, &sx)
		if got := err == nil && sx.Mask&uint32(c.mask) != 0; got != c.have {
			t.Errorf("statx(%s, %#x) answers the mount ID: %v, %v; Kernel() says %v", dir, c.mask, got, err, c.have)
		}
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_XDEV})
	if err == nil {
		unix.Close(fd)
	}
	if (err == nil) != f.Openat2 {
		t.Errorf("openat2(%s, RESOLVE_NO_XDEV) = %v; Kernel() says Openat2 %v", dir, err, f.Openat2)
	}
}
