package emptydir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// tmpfsSize returns the size (statfs blocks) and use of the filesystem
// path shows.
func tmpfsSize(t *testing.T, path string) (size, used int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Blocks-st.Bfree) * int64(st.Bsize)
}

func wantSize(t *testing.T, path string, want int64) {
	t.Helper()
	if got, _ := tmpfsSize(t, path); got != want {
		t.Errorf("size of the tmpfs at %s = %d; want %d", path, got, want)
	}
}

// wantResizeErr checks that err is an OperationError of kind matching
// target.
func wantResizeErr(t *testing.T, err error, kind volume.FailureKind, target error) {
	t.Helper()
	var oe *volume.OperationError
	if !errors.As(err, &oe) || oe.Op != "Resize" || oe.Kind != kind || !errors.Is(err, target) {
		t.Fatalf("ResizeVolume = %v; want a %s Resize error matching %v", err, kind, target)
	}
}

func TestResizeVolumeGrowAndShrink(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	pod, vol := e.memoryVolume(t) // 1 MiB
	wantSize(t, vol, 1<<20)
	before := mountEntry(t, vol)
	want := mounttest.Sentinels(t, vol)

	if err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 4<<20); err != nil {
		t.Fatalf("grow: %v", err)
	}
	wantSize(t, vol, 4<<20)
	mounttest.Intact(t, vol, want)
	meta, err := readMetadata(e.metaDir(t, "cache"))
	if err != nil || meta.SizeBytes != 4<<20 || meta.SizeLimit != 4<<20 {
		t.Errorf("metadata after growing = %+v, %v; want sizeBytes and sizeLimit 4 MiB", meta, err)
	}

	if err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 512<<10); err != nil {
		t.Fatalf("shrink: %v", err)
	}
	wantSize(t, vol, 512<<10)
	mounttest.Intact(t, vol, want)
	// A size that is no multiple of the page size: tmpfs rounds it up.
	if err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 600<<10+1); err != nil {
		t.Fatalf("shrink to an odd size: %v", err)
	}
	wantSize(t, vol, 604<<10)

	// SetUp of the ready volume (its spec still says 1 MiB) leaves the
	// resized mount alone: same mount, same size.
	e.setUp(t, pod, "cache")
	after := mountEntry(t, vol)
	if after.ID != before.ID || after.Source != before.Source {
		t.Errorf("mount after SetUp = %d %s; want the same mount %d %s", after.ID, after.Source, before.ID, before.Source)
	}
	if all, _ := mountinfo.GetMounts(mountinfo.SingleEntryFilter(vol)); len(all) != 1 {
		t.Errorf("%d mounts at %s; want 1", len(all), vol)
	}
	wantSize(t, vol, 604<<10)
	// Reconstruction gives a spec of the size the volume has.
	spec, err := e.plugin.ConstructSpec("cache", vol)
	if err != nil || spec.EmptyDir.Medium != volume.StorageMediumMemory || spec.EmptyDir.SizeLimit != 600<<10+1 {
		t.Errorf("ConstructSpec = %+v, %v; want Memory with sizeLimit %d", spec.EmptyDir, err, 600<<10+1)
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatalf("TearDown after resizing: %v", err)
	}
	mustNotExist(t, vol)
}

// TestResizeVolumeSetUpAgain: a SetUp that has to mount again (the tmpfs
// vanished) takes the size from its spec; with the spec changed as the
// resize was, the resize survives.
func TestResizeVolumeSetUpAgain(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	pod, vol := e.memoryVolume(t)
	if err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 2<<20); err != nil {
		t.Fatal(err)
	}
	mounttest.Unmount(t, vol)
	pod.Volumes[0].EmptyDir.SizeLimit = 2 << 20
	e.setUp(t, pod, "cache")
	wantSize(t, vol, 2<<20)
}

func TestResizeVolumeBelowUse(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	_, vol := e.memoryVolume(t) // 1 MiB
	mounttest.Build(t, vol, "file big "+strings.Repeat("b", 700<<10))
	want := mounttest.Sentinels(t, vol)
	metaBefore, err := os.ReadFile(filepath.Join(e.metaDir(t, "cache"), metaFileName))
	if err != nil {
		t.Fatal(err)
	}
	_, used := tmpfsSize(t, vol)

	err = e.plugin.ResizeVolume(e.ctx, testUID, "cache", 256<<10)
	wantResizeErr(t, err, volume.Transient, ErrShrinkBelowUse)
	var se *ShrinkBelowUseError
	if !errors.As(err, &se) || se.UsedBytes != used || se.RequestedBytes != 256<<10 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("error = %#v; want a ShrinkBelowUseError saying %d bytes are used, wrapping EINVAL", se, used)
	}
	if !strings.Contains(err.Error(), "uses") {
		t.Errorf("error %q does not say what the volume uses", err)
	}
	t.Logf("refusal: %v", err)
	wantSize(t, vol, 1<<20)
	mounttest.Intact(t, vol, want)
	if got, _ := os.ReadFile(filepath.Join(e.metaDir(t, "cache"), metaFileName)); string(got) != string(metaBefore) {
		t.Errorf("metadata changed by a refused resize: %s, was %s", got, metaBefore)
	}
	// Exactly the use is allowed (tmpfs counts pages).
	if err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", used); err != nil {
		t.Errorf("resize to exactly the use (%d): %v", used, err)
	}
	mounttest.Intact(t, vol, want)
}

func TestResizeVolumeForeignMount(t *testing.T) {
	mounttest.RequireMounts(t)
	t.Run("instead of the volume's", func(t *testing.T) {
		e := newEnv(t, t.TempDir(), nil)
		_, vol := e.memoryVolume(t)
		mounttest.Unmount(t, vol)
		mounttest.Tmpfs(t, vol, "size=2m")
		want := mounttest.Sentinels(t, vol)
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 8<<20)
		wantResizeErr(t, err, volume.Transient, ErrForeignMount)
		wantSize(t, vol, 2<<20)
		mounttest.Intact(t, vol, want)
	})
	t.Run("stacked on the volume's", func(t *testing.T) {
		e := newEnv(t, t.TempDir(), nil)
		_, vol := e.memoryVolume(t)
		mounttest.Tmpfs(t, vol, "size=2m")
		want := mounttest.Sentinels(t, vol)
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 8<<20)
		wantResizeErr(t, err, volume.Transient, ErrForeignMount)
		wantSize(t, vol, 2<<20)
		mounttest.Intact(t, vol, want)
		mounttest.Unmount(t, vol)
		wantSize(t, vol, 1<<20)
	})
	t.Run("another volume's tmpfs bound in", func(t *testing.T) {
		e := newEnv(t, t.TempDir(), nil)
		pod, vol := e.memoryVolume(t)
		pod.Volumes = append(pod.Volumes, volume.Spec{Name: "other", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 2 << 20}})
		other := e.setUp(t, pod, "other").Path()
		t.Cleanup(func() { _ = detach(other) })
		mounttest.Unmount(t, vol)
		mounttest.Bind(t, other, vol)
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 8<<20)
		wantResizeErr(t, err, volume.Transient, ErrForeignMount)
		wantSize(t, other, 2<<20)
	})
}

func TestResizeVolumeNotMemory(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	pod := e.pod(volume.Spec{Name: "disk", EmptyDir: &volume.EmptyDirSource{}})
	e.setUp(t, pod, "disk")
	err := e.plugin.ResizeVolume(e.ctx, testUID, "disk", 1<<20)
	wantResizeErr(t, err, volume.Final, ErrResizeUnsupported)
	if !strings.Contains(err.Error(), "only a Memory-medium volume") {
		t.Errorf("error %q does not say why", err)
	}

	t.Run("HugePages", func(t *testing.T) {
		mounttest.RequireMounts(t)
		if _, err := os.Stat("/sys/kernel/mm/hugepages/hugepages-2048kB"); err != nil {
			mounttest.Skip(t, "kernel has no 2Mi huge pages")
		}
		pod := e.pod(volume.Spec{Name: "hp", EmptyDir: &volume.EmptyDirSource{Medium: "HugePages-2Mi"}})
		pod.HugePages = map[int64]int64{2 << 20: 2 << 20}
		vol := e.setUp(t, pod, "hp").Path()
		t.Cleanup(func() { _ = detach(vol) })
		before := mountEntry(t, vol)
		err := e.plugin.ResizeVolume(e.ctx, testUID, "hp", 4<<20)
		wantResizeErr(t, err, volume.Final, ErrResizeUnsupported)
		if after := mountEntry(t, vol); after.VFSOptions != before.VFSOptions {
			t.Errorf("hugetlbfs options changed: %q, were %q", after.VFSOptions, before.VFSOptions)
		}
	})
}

func TestResizeVolumeBadSize(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	for _, size := range []int64{0, -1} {
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", size)
		wantResizeErr(t, err, volume.Final, ErrResizeUnsupported)
		if !strings.Contains(err.Error(), "addition or removal of a size limit is not supported") {
			t.Errorf("ResizeVolume(%d) = %v", size, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.root, "pods")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused resize created directories: %v", err)
	}
	err := e.plugin.ResizeVolume(e.ctx, "not/a-uid", "cache", 1<<20)
	wantResizeErr(t, err, volume.Final, err)
}

func TestResizeVolumeNotSetUp(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 1<<20)
	wantResizeErr(t, err, volume.Transient, ErrResizeDeferred)
	if !strings.Contains(err.Error(), "not yet mounted; deferring resize") {
		t.Errorf("error %q", err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "pods")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a deferred resize created directories: %v", err)
	}

	t.Run("tmpfs gone", func(t *testing.T) {
		mounttest.RequireMounts(t)
		e := newEnv(t, t.TempDir(), nil)
		_, vol := e.memoryVolume(t)
		mounttest.Unmount(t, vol)
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 4<<20)
		wantResizeErr(t, err, volume.Transient, ErrResizeDeferred)
	})
	t.Run("torn down", func(t *testing.T) {
		mounttest.RequireMounts(t)
		e := newEnv(t, t.TempDir(), nil)
		e.memoryVolume(t)
		if err := e.tearDown("cache"); err != nil {
			t.Fatal(err)
		}
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 4<<20)
		wantResizeErr(t, err, volume.Transient, ErrResizeDeferred)
	})
	t.Run("symlink in place of the directory", func(t *testing.T) {
		mounttest.RequireMounts(t)
		e := newEnv(t, t.TempDir(), nil)
		_, vol := e.memoryVolume(t)
		foreign := filepath.Join(t.TempDir(), "foreign")
		mounttest.Tmpfs(t, foreign, "size=2m")
		mounttest.Unmount(t, vol)
		if err := os.Remove(vol); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(foreign, vol); err != nil {
			t.Fatal(err)
		}
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 8<<20)
		if volume.KindOf(err) != volume.Transient || !strings.Contains(fmtErr(err), "symlink") {
			t.Errorf("ResizeVolume = %v; want a Transient error naming the symlink", err)
		}
		wantSize(t, foreign, 2<<20)
	})
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestResizeVolumeRace: between the proof and the reconfigure, an
// attacker who can write in the pod directory stacks a tmpfs of its own
// on the volume, or swaps the volume directory for a symlink to one. The
// resize acts on the proven mount (held by its descriptor) or fails;
// the attacker's tmpfs keeps its size. A resize by path (a remount of
// the directory's name) would resize the attacker's tmpfs.
func TestResizeVolumeRace(t *testing.T) {
	mounttest.RequireMounts(t)
	t.Run("stacked", func(t *testing.T) {
		e := newEnv(t, t.TempDir(), nil)
		_, vol := e.memoryVolume(t)
		hit := false
		e.plugin.hook = func(p testhook.Point, _ string) {
			if p != testhook.ResizeProven {
				return
			}
			hit = true
			mounttest.Tmpfs(t, vol, "size=2m")
		}
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 8<<20)
		if !hit {
			t.Fatal("the hook was not reached")
		}
		if err != nil {
			t.Fatalf("ResizeVolume = %v", err)
		}
		wantSize(t, vol, 2<<20) // the attacker's, untouched
		mounttest.Unmount(t, vol)
		wantSize(t, vol, 8<<20) // the volume's own, resized
	})
	t.Run("symlink", func(t *testing.T) {
		base := t.TempDir()
		foreign := filepath.Join(base, "foreign")
		mounttest.Tmpfs(t, foreign, "size=2m")
		want := mounttest.Sentinels(t, foreign)
		e := newEnv(t, filepath.Join(base, "kubelet"), nil)
		vols, vfd := e.volumesDir(t)
		// Started before the volume is mounted: in its namespace the
		// volume directory is a plain directory it can rename.
		a := mounttest.StartAttackerOnce(t, func() error {
			if err := unix.Renameat(vfd, "cache", vfd, "moved"); err != nil {
				return err
			}
			return unix.Symlinkat(foreign, vfd, "cache")
		})
		_, vol := e.memoryVolume(t)
		moved := filepath.Join(vols, "moved")
		t.Cleanup(func() {
			for mounttest.IsMountRoot(t, moved) {
				_ = detach(moved)
			}
		})
		e.plugin.hook = func(p testhook.Point, _ string) {
			if p != testhook.ResizeProven {
				return
			}
			if !a.StepWithin(10 * time.Second) {
				t.Error("the attacker could not swap the volume directory for a symlink")
			}
		}
		err := e.plugin.ResizeVolume(e.ctx, testUID, "cache", 8<<20)
		if fi, lerr := os.Lstat(vol); lerr != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("the volume path is not the attacker's symlink: %v, %v", fi, lerr)
		}
		wantSize(t, foreign, 2<<20)
		mounttest.Intact(t, foreign, want)
		if err != nil {
			t.Fatalf("ResizeVolume = %v; the proven mount is held by its descriptor and can be resized", err)
		}
		wantSize(t, moved, 8<<20) // the proven mount, under its new name
	})
}
