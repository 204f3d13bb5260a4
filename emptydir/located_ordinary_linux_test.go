package emptydir

// Located volumes (NewMounterAt/NewUnmounterAt) against attacks that mix
// a located volume with an ordinary one of the same pod.

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// TestOrdinaryNameOfLocatedMeta: an ordinary volume whose name is a
// located volume's metadata name ("wrapped_x" is not a DNS label, but the
// kubelet reconstructs any directory an attacker makes in
// volumes/kubernetes.io~empty-dir and tears it down by that name) shares
// the located volume's metadata directory. Its teardown must neither
// unmount the located volume's mount (even moved into its place, even
// with the record rewritten as an ordinary one) nor remove that metadata.
func TestOrdinaryNameOfLocatedMeta(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	loc := secretLoc("x")
	ml := e.setUpAt(t, loc, "Memory")
	want := mounttest.Sentinels(t, ml.Path())
	meta := e.metaDir(t, loc.Meta)
	wantMeta := mounttest.Snapshot(t, meta)

	// The attacker's directory in the emptyDir volumes directory.
	fake := e.layout.PodsDir() + "/" + testUID + "/volumes/kubernetes.io~empty-dir/" + loc.Meta
	mounttest.Build(t, fake, "file junk x")
	if err := e.tearDown(loc.Meta); !errors.Is(err, ErrOtherVolumesRecord) {
		t.Fatalf("ordinary TearDown(%s) = %v; want ErrOtherVolumesRecord", loc.Meta, err)
	}
	mounttest.Intact(t, ml.Path(), want)
	mounttest.Intact(t, meta, wantMeta)

	// The located mount moved onto the ordinary name's directory.
	if err := os.RemoveAll(fake); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(fake, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(ml.Path(), fake, "", unix.MS_MOVE, ""); err != nil {
		t.Skipf("MS_MOVE: %v", err)
	}
	t.Cleanup(func() { _ = detach(fake) })
	if err := e.tearDown(loc.Meta); !errors.Is(err, ErrOtherVolumesRecord) {
		t.Fatalf("ordinary TearDown(%s) of the moved mount = %v; want ErrOtherVolumesRecord", loc.Meta, err)
	}
	mounttest.Intact(t, fake, want)
	mounttest.Intact(t, meta, wantMeta)
	// Its record rewritten as an ordinary one: the source is bound to the
	// location, so it proves nothing for the ordinary name.
	saved, err := os.ReadFile(filepath.Join(meta, metaFileName))
	if err != nil {
		t.Fatal(err)
	}
	copyRecord(t, meta, meta, func(m *metadata) { m.Location = nil })
	if err := e.tearDown(loc.Meta); !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("ordinary TearDown(%s) with the record made ordinary = %v; want a refusal", loc.Meta, err)
	}
	mounttest.Intact(t, fake, want)
	if !isMounted(t, fake) {
		t.Fatal("the located volume's mount was unmounted")
	}
	// Back in place, with its own record, the located volume tears down.
	if err := os.WriteFile(filepath.Join(meta, metaFileName), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(fake, ml.Path(), "", unix.MS_MOVE, ""); err != nil {
		t.Fatalf("MS_MOVE back: %v", err)
	}
	if err := e.tearDownAt(loc); err != nil {
		t.Fatalf("TearDown of the located volume = %v", err)
	}
}

// TestLocatedOrdinarySwapRace: an attacker who writes into the pod
// directory exchanges, over and over, the secret plugin's and the emptyDir
// plugin's volumes directories (each holding a Memory volume "x", the
// located one and an ordinary one) and the two metadata directories "x"
// and "wrapped_x", while both volumes are torn down thousands of times. A
// teardown may see any mix of the four, e.g. the ordinary volume's mount
// with the ordinary record at the located location: it must refuse then.
// A teardown that succeeds must have unmounted its own mount and nothing
// else; the other volume stays mounted with its data byte for byte.
func TestLocatedOrdinarySwapRace(t *testing.T) {
	mounttest.RequireMounts(t)
	iterations := 1000
	if testing.Short() {
		iterations = 200
	}
	e := newEnv(t, t.TempDir(), nil)
	loc := secretLoc("x")
	ord := volume.Spec{Name: "x", EmptyDir: &volume.EmptyDirSource{Medium: "Memory"}}
	pod := e.pod(ord)
	podDir := filepath.Join(e.layout.PodsDir(), testUID)
	volsDir, plugDir := filepath.Join(podDir, "volumes"), filepath.Join(podDir, "plugins", "kubernetes.io~empty-dir")

	type vol struct {
		path string
		id   uint64
		want map[string]string
	}
	var lv, ov vol
	setUpL := func() {
		m := e.setUpAt(t, loc, "Memory")
		lv = vol{m.Path(), mounttest.UniqueMountID(t, m.Path()), mounttest.Sentinels(t, m.Path())}
	}
	setUpO := func() {
		m := e.setUp(t, pod, "x")
		t.Cleanup(func() { _ = detach(m.Path()) })
		ov = vol{m.Path(), mounttest.UniqueMountID(t, m.Path()), mounttest.Sentinels(t, m.Path())}
	}
	setUpL()
	setUpO()

	vfd, err := unix.Open(volsDir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(vfd)
	mfd, err := unix.Open(plugDir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	var volSwaps, metaSwaps, n int
	a := mounttest.StartAttacker(t, func() error {
		n++
		if n%2 == 0 {
			if err := mounttest.Exchange(vfd, "kubernetes.io~secret", "kubernetes.io~empty-dir"); err != nil {
				return err
			}
			volSwaps++
			return nil
		}
		if err := mounttest.Exchange(mfd, "x", loc.Meta); err != nil {
			return err
		}
		metaSwaps++
		return nil
	})
	// normalize puts every name back where it belongs (attacker paused).
	normalize := func() {
		if volSwaps%2 == 1 {
			if err := mounttest.Exchange(vfd, "kubernetes.io~secret", "kubernetes.io~empty-dir"); err != nil {
				t.Fatal(err)
			}
			volSwaps++
		}
		if metaSwaps%2 == 1 {
			if err := mounttest.Exchange(mfd, "x", loc.Meta); err != nil {
				// One of them was removed by a teardown: move the other
				// back by what its record says it is.
				for _, name := range []string{"x", loc.Meta} {
					m, err := readMetadata(filepath.Join(plugDir, name))
					if err != nil || m == nil {
						continue
					}
					right := "x"
					if m.Location != nil {
						right = loc.Meta
					}
					if right != name {
						if err := unix.Renameat(mfd, name, mfd, right); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			metaSwaps++
		}
	}
	// settle brings a volume whose teardown went ahead, or whose mount
	// its own teardown unmounted before failing, back to a fresh SetUp
	// (attacker paused, names normalized).
	hidden, partial := 0, 0
	settle := func(v *vol, ok bool, tearDown func() error, setUp func()) {
		present := mounttest.MountPresentUnique(t, v.id)
		switch {
		case ok && present:
			// It went ahead without unmounting: the attacker had moved
			// the volume's directory away, so it found none (as it could
			// by renaming it away for good). The mount was left alone.
			// Where it is now depends on which swaps the teardown met:
			// detach it wherever the names left it.
			hidden++
			if at, ok := mounttest.MountPointOfUnique(t, v.id); ok {
				if err := detach(at); err != nil {
					t.Fatalf("detach %s (the mount of %s): %v", at, v.path, err)
				}
			}
			_ = os.RemoveAll(v.path)
		case !ok && !present:
			// Its own mount was unmounted, then the removal refused (the
			// mount table names the other volume's mount by a path the
			// swap gave it): finish it undisturbed.
			partial++
			if err := tearDown(); err != nil {
				t.Fatalf("teardown after the attack: %v", err)
			}
		case !ok:
			// Refused with its mount in place: the data is intact,
			// wherever the swaps left the mount.
			at, _ := mounttest.MountPointOfUnique(t, v.id)
			mounttest.Intact(t, at, v.want)
			return
		}
		setUp()
	}
	for i := 0; i < iterations && !t.Failed(); i++ {
		a.Resume()
		errL := e.tearDownAt(loc)
		a.Pause()
		lPresent := mounttest.MountPresentUnique(t, lv.id)
		if !mounttest.MountPresentUnique(t, ov.id) {
			t.Fatalf("iteration %d: the located volume's teardown (%v) unmounted the ordinary volume's mount", i, errL)
		}
		a.Resume()
		errO := e.tearDown("x")
		a.Pause()
		if lPresent && !mounttest.MountPresentUnique(t, lv.id) {
			t.Fatalf("iteration %d: the ordinary volume's teardown (%v) unmounted the located volume's mount", i, errO)
		}
		normalize()
		settle(&lv, errL == nil, func() error { return e.tearDownAt(loc) }, setUpL)
		settle(&ov, errO == nil, func() error { return e.tearDown("x") }, setUpO)
	}
	t.Logf("%d iterations, %d attacker steps; %d teardowns found the volume moved away, %d unmounted it and then refused", iterations, a.Steps(), hidden, partial)
	if a.Steps() == 0 {
		t.Error("the attacker never swapped anything")
	}
}
