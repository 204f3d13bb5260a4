package emptydir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
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
			want := LocationRecord{PodUID: testUID, Plugin: loc.Plugin, Dir: "scratch", Sub: "mount", Meta: loc.Meta}
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
