package emptydir

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/mounttest"
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

// TestReviewAnyNSBindOfOwnTmpfs (failing): with AnyMountNamespace a mount
// is proven by type, source and device only. Whoever can mount in the pod
// directory moves the volume's tmpfs away (as in TestMountMovedAwayRefused)
// and bind-mounts it — its root, or a subdirectory — back onto the volume
// directory. The bind carries the tmpfs's source and device, so TearDown
// proves it as the volume's own, unmounts the bind (a mount it did not
// make), and drops the record, while the real tmpfs stays mounted elsewhere
// with nothing left to ever unmount it: exactly what c7a6c68's elsewhere
// check is meant to prevent, bypassed because that check runs only when the
// volume directory is not a mount root.
func TestReviewAnyNSBindOfOwnTmpfs(t *testing.T) {
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

// TestReviewOwnTmpfsAlsoBoundElsewhere (failing): the volume's tmpfs stays
// on the volume directory, and whoever can mount in the pod directory binds
// it somewhere else too (a second mount with the same unique source).
// TearDown unmounts the one on the volume directory and drops the record:
// the tmpfs, still mounted through the bind, is then unprovable forever.
// Without AnyMountNamespace too (the proof is by mount ID there, and the
// original is the one proven).
func TestReviewOwnTmpfsAlsoBoundElsewhere(t *testing.T) {
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

// TestReviewForgedSourceElsewhere (failing): the elsewhere check of
// c7a6c68 looks a record's source up in the mount table after checking
// only that it has a nodevol source's form, not that it is a source made
// for this volume (isSourceFor), which provenBy requires. Whoever writes in
// the pod directory forges volume a's record to name volume b's source
// (visible in any mount table b's tmpfs propagates to): a's TearDown then
// refuses forever, and its reason calls b's tmpfs "the volume's own" and
// tells the operator to unmount it — another volume's data.
func TestReviewForgedSourceElsewhere(t *testing.T) {
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

// TestReviewRecordRequiredSymlink (failing): with RecordRequired, a
// located volume without a record goes only by rmdir. A symlink (or a
// file) at the target — which TearDown otherwise unlinks, never follows —
// makes rmdir fail ENOTDIR, reported as a transient error: every retry
// fails the same way, forever, and the kubelet never finishes the pod.
func TestReviewRecordRequiredSymlink(t *testing.T) {
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

// TestReviewSetUpElsewhereRace (failing when the race is won): SetUp runs
// the elsewhere check only when mountedOnDir says nothing is mounted on
// the volume directory ("what is, setUpMount deals with"); setUpMount then
// opens the directory again. Whoever can mount in the pod directory moves
// the tmpfs away and toggles a mount of their own on the directory: when
// it is there for mountedOnDir and gone for setUpMount's open, SetUp skips
// the check, mounts a second tmpfs and overwrites the record of the first,
// still mounted elsewhere — the bug c7a6c68 fixed, back through a race.
func TestReviewSetUpElsewhereRace(t *testing.T) {
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
