package emptydir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// csiLoc is where a CSI node plugin's ephemeral volume lives: the kubelet
// makes volumes/kubernetes.io~csi/<name> and asks for <name>/mount.
func csiLoc(name string) Location {
	return Location{Plugin: "kubernetes.io/csi", Dir: name, Sub: "mount", Meta: "csi_" + name}
}

// TestLocatedSubdirectory: a volume one level below another plugin's
// volume directory, both media. Only Sub is made, mounted on, measured and
// removed; the directory holding it (the kubelet's, with its
// vol_data.json) is left as it was; a refused teardown keeps every byte.
func TestLocatedSubdirectory(t *testing.T) {
	for _, medium := range []volume.StorageMedium{"", "Memory"} {
		t.Run("medium="+string(medium), func(t *testing.T) {
			if medium != "" {
				mounttest.RequireMounts(t)
			}
			e := newEnv(t, t.TempDir(), nil)
			loc := csiLoc("scratch")
			parent := e.locDir(t, loc)
			mounttest.Build(t, parent, "file vol_data.json {}")
			m := e.setUpAt(t, loc, medium)
			dir := filepath.Join(parent, "mount")
			if m.Path() != dir {
				t.Fatalf("Path = %s; want %s", m.Path(), dir)
			}
			if medium == "Memory" {
				if info := mountEntry(t, dir); info.FSType != "tmpfs" || !isNodevolSource(info.Source) {
					t.Fatalf("mount = %s from %s; want tmpfs from a nodevol source", info.FSType, info.Source)
				}
			}
			meta, err := readMetadata(e.metaDir(t, loc.Meta))
			want := locationRecord{PodUID: testUID, Plugin: loc.Plugin, Dir: "scratch", Sub: "mount", Meta: loc.Meta}
			if err != nil || meta == nil || meta.Location == nil || *meta.Location != want {
				t.Fatalf("metadata = %+v, %v; want the location %+v recorded", meta, err, want)
			}
			e.setUpAt(t, loc, medium) // idempotent
			mounttest.Build(t, dir, "file data 0123456789")
			u, err := e.plugin.UsageAt(testUID, loc)
			if err != nil || u.Bytes <= 0 || u.Inodes <= 0 {
				t.Fatalf("UsageAt = %+v, %v; want the volume's use", u, err)
			}

			// The same directory without Sub, or another Sub, is another
			// location: its teardown touches nothing of this one.
			for _, other := range []Location{
				{Plugin: loc.Plugin, Dir: loc.Dir, Meta: loc.Meta},
				{Plugin: loc.Plugin, Dir: loc.Dir, Sub: "other", Meta: loc.Meta},
			} {
				if err := e.tearDownAt(other); !errors.Is(err, ErrOtherVolumesRecord) {
					t.Fatalf("TearDown at %+v = %v; want ErrOtherVolumesRecord", other, err)
				}
				if _, err := e.plugin.UsageAt(testUID, other); !errors.Is(err, ErrOtherVolumesRecord) {
					t.Errorf("UsageAt(%+v) = %v; want ErrOtherVolumesRecord", other, err)
				}
			}

			nas := filepath.Join(dir, "nas")
			mounttest.Tmpfs(t, nas, "size=1m")
			sentinels := mounttest.Sentinels(t, nas)
			snap := mounttest.Snapshot(t, parent)
			if err := e.tearDownAt(loc); !errors.Is(err, mountdetect.ErrCrossesMount) {
				t.Fatalf("TearDown with a NAS inside = %v; want a refusal", err)
			}
			mounttest.Intact(t, nas, sentinels)
			mounttest.Intact(t, parent, snap)
			if !isReady(e.metaDir(t, loc.Meta)) {
				t.Fatal("a refused teardown removed the ready marker")
			}
			mounttest.Unmount(t, nas)
			if err := e.tearDownAt(loc); err != nil {
				t.Fatalf("TearDown after the NAS went = %v", err)
			}
			mustNotExist(t, dir)
			mustNotExist(t, e.metaDir(t, loc.Meta))
			if b, err := os.ReadFile(filepath.Join(parent, "vol_data.json")); err != nil || string(b) != "{}" {
				t.Errorf("the kubelet's vol_data.json = %q, %v; want it left alone", b, err)
			}
			if err := e.tearDownAt(loc); err != nil {
				t.Errorf("second TearDown = %v", err)
			}
		})
	}
}

// TestLocatedSubdirectoryThroughSymlink: a symlink where the directory
// holding Sub belongs is never followed: SetUp fails naming it and nothing
// is made where it points; TearDown removes nothing there.
func TestLocatedSubdirectoryThroughSymlink(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	loc := csiLoc("scratch")
	parent := e.locDir(t, loc)
	outside := t.TempDir()
	mounttest.Build(t, outside, "file mount/keep precious")
	snap := mounttest.Snapshot(t, outside)
	if err := os.MkdirAll(filepath.Dir(parent), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, parent); err != nil {
		t.Fatal(err)
	}
	spec := volume.Spec{Name: loc.Meta, EmptyDir: &volume.EmptyDirSource{}}
	m, err := e.plugin.NewMounterAt(&spec, e.pod(), loc)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(e.ctx, volume.MounterArgs{}); err == nil {
		t.Fatal("SetUp through a symlinked parent succeeded")
	}
	if err := e.tearDownAt(loc); err == nil {
		t.Error("TearDown through a symlinked parent succeeded")
	}
	mounttest.Intact(t, outside, snap)
}

func TestLocationSubValidation(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	spec := &volume.Spec{Name: "csi_x", EmptyDir: &volume.EmptyDirSource{}}
	for _, sub := range []string{"..", ".", "a/b", "/mount"} {
		loc := Location{Plugin: "kubernetes.io/csi", Dir: "x", Sub: sub, Meta: "csi_x"}
		if _, err := e.plugin.NewMounterAt(spec, e.pod(), loc); !errors.Is(err, ErrInvalidLocation) {
			t.Errorf("NewMounterAt(%+v) = %v; want ErrInvalidLocation", loc, err)
		}
		if _, err := e.plugin.UsageAt(testUID, loc); !errors.Is(err, ErrInvalidLocation) {
			t.Errorf("UsageAt(%+v) = %v; want ErrInvalidLocation", loc, err)
		}
	}
}

// TestLocationRecordRequired: at a location whose volumes are always
// recorded by SetUp, a volume directory without a record is not this
// plugin's: TearDown removes it only when empty (a SetUp cut short), and
// otherwise refuses with ErrNoRecord, removing nothing. Without
// RecordRequired the same directory is torn down as a Default volume.
func TestLocationRecordRequired(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	loc := csiLoc("other")
	loc.RecordRequired = true
	dir := filepath.Join(e.locDir(t, loc), "mount")
	mounttest.Build(t, dir, "file a precious", "file b/c more")
	snap := mounttest.Snapshot(t, filepath.Dir(dir))
	if err := e.tearDownAt(loc); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("TearDown of an unrecorded, non-empty volume = %v; want ErrNoRecord", err)
	}
	mounttest.Intact(t, filepath.Dir(dir), snap)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := e.tearDownAt(loc); err != nil {
		t.Fatalf("TearDown of an unrecorded, empty volume = %v", err)
	}
	mustNotExist(t, dir)

	// A recorded volume at such a location is torn down as usual.
	m := e.setUpAt(t, loc, "")
	mounttest.Build(t, m.Path(), "file x y")
	if err := e.tearDownAt(loc); err != nil {
		t.Fatalf("TearDown of a recorded volume = %v", err)
	}
	mustNotExist(t, m.Path())

	loc.RecordRequired = false
	mounttest.Build(t, dir, "file a b")
	if err := e.tearDownAt(loc); err != nil {
		t.Fatalf("TearDown without RecordRequired = %v", err)
	}
	mustNotExist(t, dir)
}

// TestMountMovedAwayRefused: whoever can write in the pod directory
// renames a Memory volume's directory, tmpfs and all. TearDown must not
// drop the record of a mount that is still mounted (nothing would ever
// unmount it): it refuses, naming where the mount is now, and SetUp does
// not mount a second tmpfs over a new record. Once the tmpfs is gone,
// TearDown finishes.
func TestMountMovedAwayRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	pod, vol := e.memoryVolume(t)
	// Moved as a pod in another mount namespace renames the directory (a
	// mount point cannot be renamed in its own): the same mount, at
	// another path.
	moved := vol + "-moved"
	if err := os.Mkdir(moved, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(vol, moved, "", unix.MS_MOVE, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(vol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for mounttest.IsMountRoot(t, moved) {
			_ = detach(moved)
		}
	})
	if err := os.Mkdir(vol, 0o750); err != nil {
		t.Fatal(err)
	}
	err := e.tearDown("cache")
	var refused *RefusedError
	if !errors.As(err, &refused) || len(refused.Plan.Mounts) != 1 || refused.Plan.Mounts[0].MountPoint != moved {
		t.Fatalf("TearDown with the tmpfs renamed away = %v; want a refusal naming %s", err, moved)
	}
	if md, _ := readMetadata(e.metaDir(t, "cache")); md == nil || md.Mount == nil {
		t.Fatalf("the record of the mount still mounted was dropped: %+v", md)
	}
	m, err := e.plugin.NewMounter(&pod.Volumes[0], pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(e.ctx, volume.MounterArgs{}); !errors.Is(err, ErrMountElsewhere) {
		t.Fatalf("SetUp with the tmpfs renamed away = %v; want ErrMountElsewhere", err)
	}
	if mounttest.IsMountRoot(t, vol) {
		t.Fatal("SetUp mounted a second tmpfs")
	}
	if err := detach(moved); err != nil {
		t.Fatal(err)
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatalf("TearDown once the tmpfs is gone = %v", err)
	}
	mustNotExist(t, vol)
}

// TestAnyMountNamespace: a driver restarted in a new mount namespace sees
// the tmpfs its predecessor made as a propagated copy, with other mount
// IDs. With AnyMountNamespace the record proves it by type, source and
// device; without, the changed IDs are a refusal. A tmpfs carrying the
// recorded source but another superblock is never proven.
func TestAnyMountNamespace(t *testing.T) {
	mounttest.RequireMounts(t)
	// rewrite changes the recorded mount IDs, as another namespace shows
	// the same mount.
	rewrite := func(t *testing.T, e *env, loc Location, change func(*mountRecord)) {
		t.Helper()
		path := filepath.Join(e.metaDir(t, loc.Meta), metaFileName)
		md, err := readMetadata(e.metaDir(t, loc.Meta))
		if err != nil || md == nil || md.Mount == nil {
			t.Fatalf("record: %+v, %v", md, err)
		}
		change(md.Mount)
		b, err := json.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	otherIDs := func(r *mountRecord) { r.ID += 1000; r.UniqueID += 1000 }
	for _, anyNS := range []bool{false, true} {
		t.Run(fmt.Sprintf("AnyMountNamespace=%v", anyNS), func(t *testing.T) {
			e := newEnv(t, t.TempDir(), nil)
			loc := csiLoc("scratch")
			loc.AnyMountNamespace = anyNS
			m := e.setUpAt(t, loc, "Memory")
			rewrite(t, e, loc, otherIDs)
			err := e.tearDownAt(loc)
			if anyNS {
				if err != nil {
					t.Fatalf("TearDown with the mount's IDs of another namespace = %v", err)
				}
				if mounttest.IsMountRoot(t, m.Path()) {
					t.Fatal("still mounted")
				}
				return
			}
			if !errors.Is(err, mountdetect.ErrCrossesMount) || !mounttest.IsMountRoot(t, m.Path()) {
				t.Fatalf("TearDown with other mount IDs, by ID = %v; want a refusal, the mount kept", err)
			}
		})
	}
	t.Run("another superblock", func(t *testing.T) {
		e := newEnv(t, t.TempDir(), nil)
		loc := csiLoc("scratch")
		loc.AnyMountNamespace = true
		m := e.setUpAt(t, loc, "Memory")
		rewrite(t, e, loc, func(r *mountRecord) { otherIDs(r); r.Dev++ })
		if err := e.tearDownAt(loc); !errors.Is(err, mountdetect.ErrCrossesMount) || !mounttest.IsMountRoot(t, m.Path()) {
			t.Fatalf("TearDown of a tmpfs with the recorded source on another device = %v; want a refusal, the mount kept", err)
		}
	})
}

// TestLocationRecordRequiredNonDirectoryTarget: with RecordRequired, a
// located volume without a record goes only by rmdir. A symlink (or a
// file) at the target is never followed, and TearDown unlinks it or
// answers ErrNoRecord (final) — never a transient error that every retry
// repeats, which would keep the kubelet from ever finishing the pod.
func TestLocationRecordRequiredNonDirectoryTarget(t *testing.T) {
	for _, kind := range []string{"symlink", "file"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, t.TempDir(), nil)
			loc := csiLoc("other")
			loc.RecordRequired = true
			dir := filepath.Join(e.locDir(t, loc), "mount")
			if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
				t.Fatal(err)
			}
			outside := t.TempDir()
			mounttest.Build(t, outside, "file keep me")
			var err error
			if kind == "symlink" {
				err = os.Symlink(outside, dir)
			} else {
				err = os.WriteFile(dir, []byte("x"), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			err = e.tearDownAt(loc)
			if _, serr := os.Stat(filepath.Join(outside, "keep")); serr != nil {
				t.Fatalf("the symlink was followed: %v", serr)
			}
			if err != nil && !errors.Is(err, ErrNoRecord) {
				t.Fatalf("TearDown with a %s at the target and no record = %v; want success (unlinked) or ErrNoRecord (Final), not an error retried forever", kind, err)
			}
		})
	}
}
