package emptydir

// The mount proof against another pod's mount: a pending record (the
// embedder's-mounter crash recovery) or a copied record naming a tmpfs
// that SetUp made for another pod's volume proves nothing.

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

const victimUID = "0d9c1b2a-3e4f-4a5b-8c6d-7e8f9a0b1c2d"

// TestOtherPodsTmpfsRenamedInIsNotTheVolumes: a mount is proven by its
// random source, which holds nobody's data but its creator's — and the
// creator may be SetUp of another pod. An attacker who writes into pod
// directories from another mount namespace (where the victim's tmpfs,
// mounted later, is a plain directory) renames the victim pod's Memory
// volume directory into the place of its own volume's, and writes its own
// nodevol.json: a pending record naming the victim's source
// (world-readable in /proc/self/mountinfo), or simply a copy of the
// victim's nodevol.json (which records the source, the unique mount ID and
// the directory's inode, all moved along with the rename). The attacker's
// pod's TearDown must not unmount the victim's tmpfs, and its SetUp must
// not adopt it and give its root to the attacker's FSGroup: the source
// SetUp gives a filesystem names the volume it was made for (a digest of
// the pod UID and volume name, beside the random part), and a mount is
// proven only by a source made for this very volume.
func TestOtherPodsTmpfsRenamedInIsNotTheVolumes(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, forge := range []string{"pending record of its source", "copy of its record"} {
		for _, op := range []string{"TearDown", "SetUp"} {
			t.Run(forge+"/"+op, func(t *testing.T) {
				base := t.TempDir()
				e := newEnv(t, filepath.Join(base, "kubelet"), nil)
				// The attacker's pod: a Memory volume "cache" of its own.
				pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
				pod.MemoryLimit = 64 << 20
				ownVol := e.setUp(t, pod, "cache").Path()
				// Its own tmpfs is unmounted (the attacker needs a directory
				// it can remove to make room).
				if err := unix.Unmount(ownVol, 0); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(ownVol); err != nil {
					t.Fatal(err)
				}
				victimVol, err := e.layout.VolumeDir(victimUID, PluginName, "cache")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(victimVol), 0o750); err != nil {
					t.Fatal(err)
				}
				// Started before the victim's tmpfs is mounted: in its
				// namespace the victim's volume is a directory it may rename.
				a := mounttest.StartAttackerOnce(t, func() error {
					return os.Rename(victimVol, ownVol)
				})
				victim := &volume.Pod{UID: victimUID, Namespace: "default", Name: "victim", MemoryLimit: 64 << 20,
					Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}}}}
				m, err := e.plugin.NewMounter(victim.Volume("cache"), victim)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.SetUp(e.ctx, volume.MounterArgs{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					for _, p := range []string{victimVol, ownVol} {
						for mounttest.IsMountRoot(t, p) {
							_ = detach(p)
						}
					}
				})
				want := mounttest.Sentinels(t, victimVol)
				victimMeta, err := e.layout.PluginVolumeDir(victimUID, PluginName, "cache")
				if err != nil {
					t.Fatal(err)
				}
				rec, err := readMetadata(victimMeta)
				if err != nil || rec == nil || rec.Mount == nil {
					t.Fatalf("victim's record: %+v, %v", rec, err)
				}
				if !a.StepWithin(10 * time.Second) {
					t.Fatal("the attacker could not rename the victim's volume into its own volume's place")
				}
				if !mounttest.IsMountRoot(t, ownVol) {
					t.Fatal("the victim's tmpfs did not follow the rename")
				}
				switch forge {
				case "pending record of its source":
					writeForged(t, e.metaDir(t, "cache"), &mountRecord{FSType: "tmpfs", Source: rec.Mount.Source, Pending: true})
				default:
					b, err := os.ReadFile(filepath.Join(victimMeta, metaFileName))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(e.metaDir(t, "cache"), metaFileName), b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				if op == "TearDown" {
					err := e.tearDown("cache")
					t.Logf("TearDown = %v", err)
					if !mounttest.IsMountRoot(t, ownVol) {
						t.Fatal("the attacker's pod's TearDown unmounted the victim pod's tmpfs: its data is gone")
					}
					mounttest.Intact(t, ownVol, want)
					return
				}
				if err := os.Remove(filepath.Join(e.metaDir(t, "cache"), readyFileName)); err != nil {
					t.Fatal(err)
				}
				gid := int64(4242)
				am, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
				if err != nil {
					t.Fatal(err)
				}
				err = am.SetUp(e.ctx, volume.MounterArgs{FSGroup: &gid})
				t.Logf("SetUp = %v", err)
				var st unix.Stat_t
				if err := unix.Stat(ownVol, &st); err != nil {
					t.Fatal(err)
				}
				if st.Gid == uint32(gid) || st.Mode&unix.S_ISGID != 0 {
					t.Errorf("the attacker's pod's SetUp adopted the victim pod's tmpfs and gave its root to group %d (mode %#o)", st.Gid, st.Mode&0o7777)
				}
				mounttest.Intact(t, ownVol, want)
			})
		}
	}
}
