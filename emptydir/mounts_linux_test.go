package emptydir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// mountEntry returns the mount table entry for path (after resolving
// symlinks), failing the test when there is none.
func mountEntry(t *testing.T, path string) *mountinfo.Info {
	t.Helper()
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(real))
	if err != nil || len(ms) == 0 {
		t.Fatalf("no mount at %s: %v", real, err)
	}
	return ms[len(ms)-1]
}

func isMounted(t *testing.T, path string) bool {
	t.Helper()
	m, _, err := mountdetect.IsMountPoint(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return m
}

func TestMemoryVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	pod := e.pod(volume.Spec{Name: "mem", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 8 << 20}})
	pod.MemoryLimit = 64 << 20
	m := e.setUp(t, pod, "mem")
	t.Cleanup(func() { _ = detach(m.Path()) }) // only if a failure left it mounted
	info := mountEntry(t, m.Path())
	if info.FSType != "tmpfs" || !strings.Contains(info.VFSOptions, "size=8192k") {
		t.Errorf("mount = %s %q; want tmpfs with size=8192k", info.FSType, info.VFSOptions)
	}
	if kernelSupportsNoswap() && !strings.Contains(info.VFSOptions, "noswap") {
		t.Errorf("mount options %q lack noswap", info.VFSOptions)
	}
	if fi, err := os.Stat(m.Path()); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("tmpfs root mode = %v, %v; want 0777", fi.Mode(), err)
	}
	// Idempotent: no second tmpfs stacked on the first.
	e.setUp(t, pod, "mem")
	if all, _ := mountinfo.GetMounts(mountinfo.SingleEntryFilter(m.Path())); len(all) != 1 {
		t.Errorf("%d mounts at %s after a second SetUp; want 1", len(all), m.Path())
	}
	spec, err := e.plugin.ConstructSpec("mem", m.Path())
	if err != nil || spec.EmptyDir.Medium != "Memory" {
		t.Errorf("ConstructSpec = %+v, %v", spec, err)
	}
	mounttest.Build(t, m.Path(), "file data x")
	if err := e.tearDown("mem"); err != nil {
		t.Fatalf("TearDown = %v", err)
	}
	if isMounted(t, m.Path()) {
		t.Error("still mounted")
	}
	mustNotExist(t, m.Path())
	mustNotExist(t, e.metaDir(t, "mem"))
}

func TestHugePagesVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	if _, err := os.Stat("/sys/kernel/mm/hugepages/hugepages-2048kB"); err != nil {
		mounttest.Skip(t, "kernel has no 2Mi huge pages")
	}
	for _, medium := range []volume.StorageMedium{"HugePages", "HugePages-2Mi"} {
		t.Run(string(medium), func(t *testing.T) {
			e := newEnv(t, t.TempDir(), nil)
			pod := e.pod(volume.Spec{Name: "hp", EmptyDir: &volume.EmptyDirSource{Medium: medium}})
			pod.HugePages = map[int64]int64{2 << 20: 2 << 20}
			m := e.setUp(t, pod, "hp")
			info := mountEntry(t, m.Path())
			if info.FSType != "hugetlbfs" || !strings.Contains(info.VFSOptions, "pagesize=2M") {
				t.Errorf("mount = %s %q; want hugetlbfs pagesize=2M", info.FSType, info.VFSOptions)
			}
			d, err := mountdetect.Detect(m.Path())
			if err != nil || MediumOf(d) != volume.MediumHugePages || d.HugePageSize != 2<<20 {
				t.Errorf("Detect = %+v, %v", d, err)
			}
			spec, err := e.plugin.ConstructSpec("hp", m.Path())
			if err != nil || spec.EmptyDir.Medium != "HugePages-2Mi" {
				t.Errorf("ConstructSpec = %+v, %v", spec, err)
			}
			if err := e.tearDown("hp"); err != nil {
				t.Fatalf("TearDown = %v", err)
			}
			if isMounted(t, m.Path()) {
				t.Error("still mounted")
			}
			mustNotExist(t, m.Path())
		})
	}
}

// TestNestedNASRefused is the incident: a NAS (tmpfs), a same-filesystem
// bind mount or a bind-mounted file inside a Default or a Memory emptyDir.
// TearDown refuses and changes nothing — ready marker and metadata stay —
// and succeeds once the mount is gone.
func TestNestedNASRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	nested := []struct {
		name  string
		mount func(t *testing.T, base, vol string) string
	}{
		{"tmpfs", func(t *testing.T, base, vol string) string {
			nas := filepath.Join(vol, "nas")
			mounttest.Tmpfs(t, nas, "size=1m")
			mounttest.Sentinels(t, nas)
			return nas
		}},
		{"same-fs bind", func(t *testing.T, base, vol string) string {
			src := filepath.Join(base, "share")
			mounttest.Sentinels(t, src)
			dst := filepath.Join(vol, "sub/share")
			mounttest.Bind(t, src, dst)
			return dst
		}},
		{"bind-mounted file", func(t *testing.T, base, vol string) string {
			mounttest.Build(t, base, "file secret.conf do-not-delete")
			dst := filepath.Join(vol, "secret.conf")
			mounttest.Bind(t, filepath.Join(base, "secret.conf"), dst)
			return dst
		}},
	}
	for _, medium := range []volume.StorageMedium{"", "Memory"} {
		for _, n := range nested {
			t.Run(string(medium)+"/"+n.name, func(t *testing.T) {
				base := t.TempDir()
				e := newEnv(t, filepath.Join(base, "kubelet"), nil)
				m := e.setUp(t, e.pod(emptyDirSpec("cache", medium)), "cache")
				if medium == "Memory" {
					t.Cleanup(func() { _ = detach(m.Path()) })
				}
				mounttest.Build(t, m.Path(), "file pod-data keep")
				mp := n.mount(t, base, m.Path())
				before := mounttest.Snapshot(t, base)

				err := e.tearDown("cache")
				if !errors.Is(err, mountdetect.ErrCrossesMount) {
					t.Fatalf("TearDown = %v; want ErrCrossesMount", err)
				}
				var refused *RefusedError
				var crossing *mountdetect.CrossesMountError
				if !errors.As(err, &refused) || !errors.As(err, &crossing) || volume.KindOf(err) != volume.Transient {
					t.Fatalf("TearDown = %v; want a transient *RefusedError wrapping *CrossesMountError", err)
				}
				if got := mountPointsOf(crossing.Mounts); !slices.Equal(got, []string{mp}) || !strings.Contains(err.Error(), mp) {
					t.Errorf("mounts = %q, error %q; want [%s]", got, err, mp)
				}
				mounttest.Intact(t, base, before) // everything, ready marker and metadata included
				if !isReady(e.metaDir(t, "cache")) {
					t.Error("ready marker removed by a refused TearDown")
				}
				if medium == "Memory" && !isMounted(t, m.Path()) {
					t.Error("a refused TearDown unmounted the tmpfs")
				}

				mounttest.Unmount(t, mp)
				if err := e.tearDown("cache"); err != nil {
					t.Fatalf("TearDown after unmount = %v", err)
				}
				mustNotExist(t, m.Path())
				mustNotExist(t, e.metaDir(t, "cache"))
			})
		}
	}
}

func mountPointsOf(ms []mountdetect.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.MountPoint)
	}
	return out
}

// TestForeignMountOnVolumeRefused: something that is not tmpfs/hugetlbfs
// mounted on the volume directory itself (an NFS share, here a bind mount)
// is refused: unmounting it is not the emptyDir's business, and removing
// through it would delete its data.
func TestForeignMountOnVolumeRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	base := t.TempDir()
	e := newEnv(t, filepath.Join(base, "kubelet"), nil)
	m := e.setUp(t, e.pod(emptyDirSpec("cache", "")), "cache")
	share := filepath.Join(base, "share")
	snap := mounttest.Sentinels(t, share)
	mounttest.Bind(t, share, m.Path())
	err := e.tearDown("cache")
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Plan.Action != ActionRefuse || !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown = %v; want a refusal", err)
	}
	mounttest.Intact(t, share, snap)
	if !isMounted(t, m.Path()) {
		t.Error("the foreign mount was unmounted")
	}
	plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
	if err != nil || plan.Action != ActionRefuse || len(plan.Mounts) != 1 || plan.Mounts[0].MountPoint != m.Path() {
		t.Errorf("PlanTearDown = %+v, %v", plan, err)
	}
}

func TestUsageOfMemoryVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	m := e.setUp(t, e.pod(volume.Spec{Name: "mem", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 4 << 20}}), "mem")
	t.Cleanup(func() { _ = detach(m.Path()) })
	mounttest.Build(t, m.Path(), "file a "+strings.Repeat("x", 100000))
	u, err := e.plugin.Usage(testUID, "mem")
	if err != nil || u.Source != SourceStatfs || u.Bytes < 100000 || u.Inodes < 2 {
		t.Errorf("Usage = %+v, %v; want statfs with at least 100000 bytes", u, err)
	}
	if u.FS.CapacityBytes != 4<<20 || u.FS.AvailableBytes != u.FS.CapacityBytes-u.Bytes {
		t.Errorf("Usage.FS = %+v; want the 4 MiB tmpfs, %d bytes of it used", u.FS, u.Bytes)
	}
}
