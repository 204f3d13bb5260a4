package emptydir

// A volume's recorded tmpfs mounted somewhere besides the volume directory
// (moved away, bound elsewhere) keeps its record: a teardown that cannot
// unmount it refuses instead of forgetting it, and a SetUp does not mount
// a second one over its record.

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// detachAll detaches every mount stacked on path (test cleanup).
func detachAll(t *testing.T, path string) {
	t.Cleanup(func() {
		for i := 0; i < 8 && mounttest.IsMountRoot(t, path); i++ {
			_ = detach(path)
		}
	})
}

// TestAnyMountNamespaceBindOfOwnTmpfsRefused: with AnyMountNamespace a
// mount is proven by type, source and device only. Whoever can mount in
// the pod directory moves the volume's tmpfs away (as in
// TestMountMovedAwayRefused) and bind-mounts it — its root, or a
// subdirectory — back onto the volume directory. The bind carries the
// tmpfs's source and device, yet TearDown must refuse, naming where the
// tmpfs is, and keep the record: unmounting the bind (a mount it did not
// make) and dropping the record would leave the real tmpfs mounted with
// nothing to ever unmount it. The check that the recorded tmpfs is not
// mounted elsewhere runs when the volume directory is a mount root too.
func TestAnyMountNamespaceBindOfOwnTmpfsRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, sub := range []string{"", "sub"} {
		t.Run("bind of /"+sub, func(t *testing.T) {
			e := newEnv(t, t.TempDir(), nil)
			loc := csiLoc("scratch")
			loc.AnyMountNamespace, loc.RecordRequired = true, true
			m := e.setUpAt(t, loc, "Memory")
			vol := m.Path()
			mounttest.Build(t, vol, "file sub/precious data")
			moved := filepath.Join(filepath.Dir(vol), "moved")
			if err := os.Mkdir(moved, 0o750); err != nil {
				t.Fatal(err)
			}
			detachAll(t, moved)
			detachAll(t, vol)
			if err := unix.Mount(vol, moved, "", unix.MS_MOVE, ""); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount(filepath.Join(moved, sub), vol, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			err := e.tearDownAt(loc)
			md, _ := readMetadata(e.metaDir(t, loc.Meta))
			if mounttest.IsMountRoot(t, moved) && (md == nil || md.Mount == nil) {
				t.Fatalf("TearDown = %v: it unmounted a bind it did not make and dropped the record while the volume's tmpfs is still mounted at %s", err, moved)
			}
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("TearDown = %v; want a refusal naming %s", err, moved)
			}
		})
	}
}

// TestOwnTmpfsAlsoBoundElsewhereKeepsRecord: the volume's tmpfs stays on
// the volume directory, and whoever can mount in the pod directory binds
// it somewhere else too (a second mount with the same unique source).
// TearDown must not drop the record while the tmpfs is still mounted
// through the bind, where nothing could prove it afterwards. Both with
// AnyMountNamespace and without (the proof is by mount ID there, and the
// original is the one proven).
func TestOwnTmpfsAlsoBoundElsewhereKeepsRecord(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, anyNS := range []bool{false, true} {
		name := "byID"
		if anyNS {
			name = "AnyMountNamespace"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, t.TempDir(), nil)
			loc := csiLoc("scratch")
			loc.AnyMountNamespace, loc.RecordRequired = anyNS, true
			m := e.setUpAt(t, loc, "Memory")
			vol := m.Path()
			mounttest.Build(t, vol, "file precious data")
			other := filepath.Join(filepath.Dir(vol), "other")
			if err := os.Mkdir(other, 0o750); err != nil {
				t.Fatal(err)
			}
			detachAll(t, other)
			if err := unix.Mount(vol, other, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			err := e.tearDownAt(loc)
			md, _ := readMetadata(e.metaDir(t, loc.Meta))
			if mounttest.IsMountRoot(t, other) && (md == nil || md.Mount == nil) {
				t.Fatalf("TearDown = %v: the record was dropped while the volume's tmpfs is still mounted at %s", err, other)
			}
		})
	}
}

// TestForgedSourceOfAnotherVolumeNotElsewhere: the check that a recorded
// tmpfs is mounted elsewhere looks the record's source up in the mount
// table only when it is a source made for this volume (isSourceFor), as
// provenBy requires. Whoever writes in the pod directory forges volume a's
// record to name volume b's source (visible in any mount table b's tmpfs
// propagates to): a's TearDown must succeed, not refuse forever calling
// b's tmpfs "the volume's own" and telling the operator to unmount it
// (another volume's data); b's tmpfs stays mounted.
func TestForgedSourceOfAnotherVolumeNotElsewhere(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	la, lb := csiLoc("a"), csiLoc("b")
	ma := e.setUpAt(t, la, "Memory")
	mb := e.setUpAt(t, lb, "Memory")
	rb, err := readMetadata(e.metaDir(t, lb.Meta))
	if err != nil || rb == nil || rb.Mount == nil {
		t.Fatalf("b's record: %+v, %v", rb, err)
	}
	// a's tmpfs is gone (unmounted by hand); its record is forged.
	if err := detach(ma.Path()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.metaDir(t, la.Meta), metaFileName)
	ra, err := readMetadata(e.metaDir(t, la.Meta))
	if err != nil || ra == nil || ra.Mount == nil {
		t.Fatalf("a's record: %+v, %v", ra, err)
	}
	ra.Mount.Source = rb.Mount.Source
	b, err := json.Marshal(ra)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	err = e.tearDownAt(la)
	var refused *RefusedError
	if errors.As(err, &refused) {
		for _, m := range refused.Plan.Mounts {
			if m.MountPoint == mb.Path() {
				t.Fatalf("TearDown of a with a record forged to name b's source = %v: refused, calling b's tmpfs a's own", err)
			}
		}
	}
	if err != nil {
		t.Fatalf("TearDown of a = %v", err)
	}
	if !mounttest.IsMountRoot(t, mb.Path()) {
		t.Fatal("b's tmpfs is gone")
	}
}

// TestSetUpElsewhereCheckRace: the recorded tmpfs is moved away from the
// volume directory, and whoever can mount in the pod directory toggles a
// mount of their own on the directory while SetUp runs again and again
// (SetUp looks at the directory, then opens it). Whatever each step sees,
// SetUp must never mount a second tmpfs and overwrite the record of the
// first while the first is still mounted elsewhere. A run that never saw
// SetUp succeed says so in the log.
func TestSetUpElsewhereCheckRace(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	pod, vol := e.memoryVolume(t)
	moved := vol + "-moved"
	if err := os.Mkdir(moved, 0o750); err != nil {
		t.Fatal(err)
	}
	detachAll(t, moved)
	if err := unix.Mount(vol, moved, "", unix.MS_MOVE, ""); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if unix.Mount("attacker", vol, "tmpfs", 0, "size=1m") == nil {
				_ = unix.Unmount(vol, unix.MNT_DETACH)
			}
		}
	}()
	m, err := e.plugin.NewMounter(&pod.Volumes[0], pod)
	if err != nil {
		t.Fatal(err)
	}
	var won error
	deadline := time.Now().Add(4 * time.Second)
	tries := 0
	for time.Now().Before(deadline) {
		tries++
		if err := m.SetUp(e.ctx, volume.MounterArgs{}); err == nil {
			won = errors.New("SetUp succeeded")
			break
		}
	}
	close(stop)
	<-done
	if won != nil && mounttest.IsMountRoot(t, moved) {
		md, _ := readMetadata(e.metaDir(t, "cache"))
		t.Fatalf("after %d tries, %v while the recorded tmpfs is still mounted at %s; the record now names %+v", tries, won, moved, md.Mount)
	}
	t.Logf("race not won in %d tries", tries)
}
