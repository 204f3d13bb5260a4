package emptydir

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

func modePtr(m uint32) *uint32 { return &m }

// fileMode is the mode bits of path (permissions, sticky, setgid) as
// stat gives them.
func fileMode(t *testing.T, path string) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 0o7777
}

// TestEmptyDirVolumeMode: the EmptyDirVolumeMode feature. The mode is
// applied whatever the umask; nil is the default (0777, 01777 with
// StickyBit); StickyBit adds the sticky bit to Mode.
func TestEmptyDirVolumeMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, tc := range []struct {
		name   string
		mode   *uint32
		sticky bool
		want   uint32
	}{
		{"nil", nil, false, 0o777},
		{"nil sticky", nil, true, 0o1777},
		{"0750", modePtr(0o750), false, 0o750},
		{"01777", modePtr(0o1777), false, 0o1777},
		{"0750 sticky", modePtr(0o750), true, 0o1750},
		{"0", modePtr(0), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want&0o500 != 0o500 {
				// Not even its owner may list it: only root reopens it.
				mounttest.RequireRoot(t, "a directory of mode 0 is opened again by root only")
			}
			e := newEnv(t, t.TempDir(), nil)
			pod := e.pod(volume.Spec{Name: "v", EmptyDir: &volume.EmptyDirSource{Mode: tc.mode, StickyBit: tc.sticky}})
			dir := e.setUp(t, pod, "v").Path()
			if got := fileMode(t, dir); got != tc.want {
				t.Errorf("mode = %#o; want %#o", got, tc.want)
			}
			meta, err := readMetadata(e.metaDir(t, "v"))
			if err != nil || (tc.mode == nil) != (meta.Mode == nil) || (tc.mode != nil && *meta.Mode != *tc.mode) {
				t.Errorf("metadata = %+v, %v; want mode %v recorded", meta, err, tc.mode)
			}
			spec, err := e.plugin.ConstructSpec("v", dir)
			if err != nil || (tc.mode == nil) != (spec.EmptyDir.Mode == nil) || (tc.mode != nil && *spec.EmptyDir.Mode != *tc.mode) {
				t.Errorf("ConstructSpec = %+v, %v; want mode %v", spec.EmptyDir, err, tc.mode)
			} else if spec.EmptyDir.StickyBit != tc.sticky || spec.EmptyDir.EffectiveMode() != tc.want {
				t.Errorf("ConstructSpec = %+v; want StickyBit %v, mode %#o", spec.EmptyDir, tc.sticky, tc.want)
			}
			// Repeated SetUp keeps it.
			e.setUp(t, pod, "v")
			if got := fileMode(t, dir); got != tc.want {
				t.Errorf("mode after a second SetUp = %#o; want %#o", got, tc.want)
			}
		})
	}
	t.Run("FSGroup adds setgid", func(t *testing.T) {
		mounttest.RequireRoot(t, "chown to a group")
		e := newEnv(t, t.TempDir(), nil)
		pod := e.pod(volume.Spec{Name: "v", EmptyDir: &volume.EmptyDirSource{Mode: modePtr(0o750)}})
		m, err := e.plugin.NewMounter(pod.Volume("v"), pod)
		if err != nil {
			t.Fatal(err)
		}
		gid := int64(1234)
		if err := m.SetUp(e.ctx, volume.MounterArgs{FSGroup: &gid}); err != nil {
			t.Fatal(err)
		}
		if got := fileMode(t, m.Path()); got != 0o2750 {
			t.Errorf("mode = %#o; want 02750", got)
		}
	})
}

// TestEmptyDirVolumeModeMemory: for a tmpfs or hugetlbfs volume the mode
// is the mount root's, the directory the pod sees (upstream chmods the
// directory before mounting over it, where the pod never sees it). With no
// mode the root is 01777, the kubelet's tmpfs root's: Kubernetes's
// "nonexistent volume subPath should have the correct mode and owner using
// FSGroup" spec wants the sticky bit on a subPath made in it.
func TestEmptyDirVolumeModeMemory(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	pod := e.pod(
		volume.Spec{Name: "m", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", Mode: modePtr(0o750)}},
		volume.Spec{Name: "s", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", Mode: modePtr(0o1777)}},
		volume.Spec{Name: "d", EmptyDir: &volume.EmptyDirSource{Medium: "Memory"}},
	)
	pod.MemoryLimit = 64 << 20
	for name, want := range map[string]uint32{"m": 0o750, "s": 0o1777, "d": 0o1777} {
		dir := e.setUp(t, pod, name).Path()
		t.Cleanup(func() { _ = detach(dir) })
		if !mounttest.IsMountRoot(t, dir) {
			t.Fatalf("%s is not mounted", dir)
		}
		if got := fileMode(t, dir); got != want {
			t.Errorf("volume %s: mount root mode = %#o; want %#o", name, got, want)
		}
		e.setUp(t, pod, name)
		if got := fileMode(t, dir); got != want {
			t.Errorf("volume %s: mode after a second SetUp = %#o; want %#o", name, got, want)
		}
	}
}

func TestEmptyDirVolumeModeInvalid(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	for _, mode := range []uint32{0o2000, 0o4755, 0o2777, 0o10000, 0o7777, ^uint32(0)} {
		pod := e.pod(volume.Spec{Name: "v", EmptyDir: &volume.EmptyDirSource{Mode: modePtr(mode)}})
		if err := pod.Validate(); err == nil || !strings.Contains(err.Error(), "0 to 01777") {
			t.Errorf("Validate with mode %#o = %v; want an error", mode, err)
		}
		_, err := e.plugin.NewMounter(pod.Volume("v"), pod)
		if err == nil || volume.KindOf(err) != volume.Final {
			t.Errorf("NewMounter with mode %#o = %v; want a Final error", mode, err)
		}
		// A mounter made without validating (a plugin's own) fails in SetUp, Final,
		// before touching the disk.
		m := &mounter{plugin: e.plugin, source: *pod.Volume("v").EmptyDir, pod: pod, name: "v", dir: e.root + "/x"}
		err = m.SetUp(e.ctx, volume.MounterArgs{})
		if err == nil || volume.KindOf(err) != volume.Final {
			t.Errorf("SetUp with mode %#o = %v; want a Final error", mode, err)
		}
	}
	if _, err := os.Stat(e.root + "/pods"); !os.IsNotExist(err) {
		t.Errorf("an invalid mode created directories: %v", err)
	}
}
