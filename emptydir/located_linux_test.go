package emptydir

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

const secretPlugin = "kubernetes.io/secret"

func secretLoc(name string) Location {
	return Location{Plugin: secretPlugin, Dir: name, Meta: "wrapped_" + name}
}

func (e *env) locDir(t *testing.T, loc Location) string {
	t.Helper()
	d, err := e.layout.VolumeDir(testUID, loc.Plugin, loc.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *env) setUpAt(t *testing.T, loc Location, medium volume.StorageMedium) volume.Mounter {
	t.Helper()
	spec := volume.Spec{Name: loc.Meta, EmptyDir: &volume.EmptyDirSource{Medium: medium}}
	m, err := e.plugin.NewMounterAt(&spec, e.pod(), loc)
	if err != nil {
		t.Fatalf("NewMounterAt(%+v): %v", loc, err)
	}
	if err := m.SetUp(e.ctx, volume.MounterArgs{}); err != nil {
		t.Fatalf("SetUp at %+v: %v", loc, err)
	}
	t.Cleanup(func() { _ = detach(m.Path()) }) // only if a failure left it mounted
	return m
}

func (e *env) tearDownAt(loc Location) error {
	u, err := e.plugin.NewUnmounterAt(testUID, loc)
	if err != nil {
		return err
	}
	return u.TearDown(e.ctx)
}

// TestOrdinarySourceDigestUnchanged pins the digest of an ordinary
// volume's mount source: records written before located volumes existed
// must still prove their mounts.
func TestOrdinarySourceDigestUnchanged(t *testing.T) {
	// Computed with the digest as it was before located volumes.
	const ordinarySourceGolden = "nodevol-emptydir-0123456789abcdef-ba2a0dafebca7e9f"
	got := sourceFor("0123456789abcdef", testUID, "cache")
	if got != ordinarySourceGolden {
		t.Fatalf("sourceFor = %s; want %s (the digest of ordinary volumes must never change)", got, ordinarySourceGolden)
	}
	if s := refSourceFor("0123456789abcdef", ordinaryRef(testUID, "cache")); s != got {
		t.Errorf("refSourceFor(ordinary) = %s; want %s", s, got)
	}
	loc := locatedRef(testUID, Location{Plugin: secretPlugin, Dir: "cache", Meta: "wrapped_cache"})
	if s := refSourceFor("0123456789abcdef", loc); s == got || !isNodevolSource(s) {
		t.Errorf("located source %s: want a nodevol source other than the ordinary one", s)
	}
}

func TestLocationValidation(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	spec := &volume.Spec{Name: "wrapped_x", EmptyDir: &volume.EmptyDirSource{Medium: "Memory"}}
	for _, loc := range []Location{
		{Plugin: PluginName, Dir: "x", Meta: "wrapped_x"},
		{Plugin: "kubernetes.io~secret", Dir: "x", Meta: "wrapped_x"},
		{Plugin: "", Dir: "x", Meta: "wrapped_x"},
		{Plugin: secretPlugin, Dir: "..", Meta: "wrapped_x"},
		{Plugin: secretPlugin, Dir: "a/b", Meta: "wrapped_x"},
		{Plugin: secretPlugin, Dir: "x", Meta: "x"},     // an ordinary volume's metadata name
		{Plugin: secretPlugin, Dir: "x", Meta: "../x_"}, // not one element
		{Plugin: secretPlugin, Dir: "x", Meta: ""},
	} {
		if _, err := e.plugin.NewMounterAt(spec, e.pod(), loc); !errors.Is(err, ErrInvalidLocation) {
			t.Errorf("NewMounterAt(%+v) = %v; want ErrInvalidLocation", loc, err)
		}
		if _, err := e.plugin.NewUnmounterAt(testUID, loc); !errors.Is(err, ErrInvalidLocation) {
			t.Errorf("NewUnmounterAt(%+v) = %v; want ErrInvalidLocation", loc, err)
		}
	}
	if _, err := e.plugin.NewUnmounterAt("../x", secretLoc("x")); err == nil {
		t.Error("NewUnmounterAt accepted the pod UID ../x")
	}
	bad := &volume.Spec{Name: "wrapped_x", EmptyDir: &volume.EmptyDirSource{SizeLimit: -1}}
	if _, err := e.plugin.NewMounterAt(bad, e.pod(), secretLoc("x")); err == nil {
		t.Error("NewMounterAt accepted a negative sizeLimit")
	}
}

// TestLocatedMemoryVolume: a secret's Memory emptyDir, set up and torn
// down in the secret plugin's directory, its metadata in
// plugins/kubernetes.io~empty-dir/wrapped_<name>.
func TestLocatedMemoryVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	loc := secretLoc("creds")
	m := e.setUpAt(t, loc, "Memory")
	dir := e.locDir(t, loc)
	if m.Path() != dir {
		t.Fatalf("Path = %s; want %s", m.Path(), dir)
	}
	info := mountEntry(t, dir)
	if info.FSType != "tmpfs" || !isNodevolSource(info.Source) {
		t.Fatalf("mount = %s from %s; want tmpfs from a nodevol source", info.FSType, info.Source)
	}
	meta, err := readMetadata(e.metaDir(t, loc.Meta))
	if err != nil || meta == nil || meta.Location == nil || *meta.Location != (locationRecord{PodUID: testUID, Plugin: secretPlugin, Dir: "creds", Meta: "wrapped_creds"}) {
		t.Fatalf("metadata = %+v, %v; want the location recorded", meta, err)
	}
	if !isReady(e.metaDir(t, loc.Meta)) {
		t.Fatal("no ready marker")
	}
	mustNotExist(t, filepath.Join(e.root, "pods", testUID, "volumes", "kubernetes.io~empty-dir", "creds"))
	// Idempotent.
	e.setUpAt(t, loc, "Memory")
	mounttest.Build(t, dir, "file username admin", "file ..data/password hunter2")

	// An ordinary volume named after the metadata never touches it.
	err = e.tearDown(loc.Meta)
	if !errors.Is(err, ErrOtherVolumesRecord) {
		t.Fatalf("ordinary TearDown(%s) = %v; want ErrOtherVolumesRecord", loc.Meta, err)
	}
	if !isReady(e.metaDir(t, loc.Meta)) || !isMounted(t, dir) {
		t.Fatal("the ordinary teardown touched the located volume")
	}
	if _, err := e.plugin.Usage(testUID, loc.Meta); !errors.Is(err, ErrOtherVolumesRecord) {
		t.Errorf("Usage(%s) = %v; want ErrOtherVolumesRecord", loc.Meta, err)
	}

	u, err := e.plugin.NewUnmounterAt(testUID, loc)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.(volume.TearDownChecker).CheckTearDown(e.ctx); err != nil {
		t.Fatalf("CheckTearDown = %v", err)
	}
	if err := u.TearDown(e.ctx); err != nil {
		t.Fatalf("TearDown = %v", err)
	}
	if isMounted(t, dir) {
		t.Error("still mounted")
	}
	mustNotExist(t, dir)
	mustNotExist(t, e.metaDir(t, loc.Meta))
	if _, err := os.Stat(filepath.Dir(dir)); err != nil {
		t.Errorf("the secret plugin's volumes directory: %v", err)
	}
	if err := u.TearDown(e.ctx); err != nil {
		t.Errorf("second TearDown = %v", err)
	}
}

// TestLocatedDefaultVolume: a Default emptyDir in another plugin's
// directory (the gitRepo plugin's kind).
func TestLocatedDefaultVolume(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	loc := Location{Plugin: "kubernetes.io/git-repo", Dir: "src", Meta: "wrapped_src"}
	m := e.setUpAt(t, loc, "")
	mounttest.Build(t, m.Path(), "file a/b c")
	if err := e.tearDownAt(loc); err != nil {
		t.Fatalf("TearDown = %v", err)
	}
	mustNotExist(t, m.Path())
	mustNotExist(t, e.metaDir(t, loc.Meta))
}

func TestLocatedNestedNASRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	loc := secretLoc("creds")
	m := e.setUpAt(t, loc, "Memory")
	nas := filepath.Join(m.Path(), "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	want := mounttest.Sentinels(t, nas)
	err := e.tearDownAt(loc)
	if !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown = %v; want a refusal", err)
	}
	mounttest.Intact(t, nas, want)
	if !isReady(e.metaDir(t, loc.Meta)) || !isMounted(t, m.Path()) {
		t.Fatal("a refused teardown changed the volume")
	}
	mounttest.Unmount(t, nas)
	if err := e.tearDownAt(loc); err != nil {
		t.Fatalf("TearDown after the NAS went = %v", err)
	}
	mustNotExist(t, m.Path())
}

func TestLocatedForeignMountRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	loc := secretLoc("creds")
	dir := e.locDir(t, loc)
	mounttest.Tmpfs(t, dir, "size=1m")
	want := mounttest.Sentinels(t, dir)
	if err := e.tearDownAt(loc); !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown = %v; want a refusal", err)
	}
	mounttest.Intact(t, dir, want)
	// SetUp never adopts it either.
	spec := volume.Spec{Name: loc.Meta, EmptyDir: &volume.EmptyDirSource{Medium: "Memory"}}
	mt, err := e.plugin.NewMounterAt(&spec, e.pod(), loc)
	if err != nil {
		t.Fatal(err)
	}
	if err := mt.SetUp(e.ctx, volume.MounterArgs{}); err == nil {
		t.Fatal("SetUp adopted a foreign mount")
	}
	mounttest.Intact(t, dir, want)
}

// copyRecord copies from's nodevol.json into to's metadata directory,
// edited by edit, with a ready marker.
func copyRecord(t *testing.T, fromMeta, toMeta string, edit func(*metadata)) {
	t.Helper()
	m, err := readMetadata(fromMeta)
	if err != nil || m == nil {
		t.Fatalf("read %s: %+v, %v", fromMeta, m, err)
	}
	if edit != nil {
		edit(m)
	}
	b, _ := json.Marshal(m)
	if err := os.MkdirAll(toMeta, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(toMeta, metaFileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(toMeta, readyFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLocatedRecordOfAnotherVolume: a record copied from another location
// or from an ordinary volume proves nothing at this one, as it is or with
// its location rewritten, even with that volume's very mount moved here.
func TestLocatedRecordOfAnotherVolume(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, t.TempDir(), nil)
	a, b := secretLoc("a"), secretLoc("b")
	ma := e.setUpAt(t, a, "Memory")
	mb := e.setUpAt(t, b, "Memory")
	wantB := mounttest.Sentinels(t, mb.Path())

	// As it is: another volume's record.
	copyRecord(t, e.metaDir(t, a.Meta), e.metaDir(t, b.Meta), nil)
	if err := e.tearDownAt(b); !errors.Is(err, ErrOtherVolumesRecord) {
		t.Fatalf("TearDown with a's record = %v; want ErrOtherVolumesRecord", err)
	}
	mounttest.Intact(t, mb.Path(), wantB)
	// Rewritten to name b: a's mount IDs and source still prove nothing.
	copyRecord(t, e.metaDir(t, a.Meta), e.metaDir(t, b.Meta), func(m *metadata) { m.Location.Dir, m.Location.Meta = b.Dir, b.Meta })
	if err := e.tearDownAt(b); !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown with a's rewritten record = %v; want a refusal", err)
	}
	mounttest.Intact(t, mb.Path(), wantB)

	// a's own mount, moved to a third location with a's record rewritten
	// for it: IDs and type match, the source is bound to a.
	c := secretLoc("c")
	cdir := e.locDir(t, c)
	if err := os.MkdirAll(cdir, 0o750); err != nil {
		t.Fatal(err)
	}
	wantA := mounttest.Sentinels(t, ma.Path())
	if err := unix.Mount(ma.Path(), cdir, "", unix.MS_MOVE, ""); err != nil {
		t.Logf("MS_MOVE: %v; the bound source is checked by TestLocatedSourceBinding", err)
	} else {
		t.Cleanup(func() { _ = detach(cdir) })
		copyRecord(t, e.metaDir(t, a.Meta), e.metaDir(t, c.Meta), func(m *metadata) { m.Location.Dir, m.Location.Meta = c.Dir, c.Meta })
		if err := e.tearDownAt(c); !errors.Is(err, mountdetect.ErrCrossesMount) {
			t.Fatalf("TearDown of a's moved mount = %v; want a refusal", err)
		}
		mounttest.Intact(t, cdir, wantA)
	}

	// An ordinary volume's record, as it is and given a location.
	o := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory"}})
	mo := e.setUp(t, o, "cache")
	t.Cleanup(func() { _ = detach(mo.Path()) })
	copyRecord(t, e.metaDir(t, "cache"), e.metaDir(t, b.Meta), nil)
	if err := e.tearDownAt(b); !errors.Is(err, ErrOtherVolumesRecord) {
		t.Fatalf("TearDown with an ordinary record = %v; want ErrOtherVolumesRecord", err)
	}
	copyRecord(t, e.metaDir(t, "cache"), e.metaDir(t, b.Meta), func(m *metadata) { m.Location = locatedRef(testUID, b).record() })
	if err := e.tearDownAt(b); !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown with an ordinary record given b's location = %v; want a refusal", err)
	}
	mounttest.Intact(t, mb.Path(), wantB)
	if !isMounted(t, mb.Path()) || !isMounted(t, mo.Path()) {
		t.Fatal("a refused teardown unmounted something")
	}
	// And a located record never proves an ordinary volume's mount.
	copyRecord(t, e.metaDir(t, b.Meta), e.metaDir(t, "cache"), nil)
	if err := e.tearDown("cache"); !errors.Is(err, ErrOtherVolumesRecord) {
		t.Fatalf("ordinary TearDown with a located record = %v; want ErrOtherVolumesRecord", err)
	}
	if !isMounted(t, mo.Path()) {
		t.Fatal("the ordinary volume was unmounted")
	}
}

// TestLocatedSourceBinding: a mount's source proves it only for the
// location (pod, plugin, directory, metadata name) it was made for.
func TestLocatedSourceBinding(t *testing.T) {
	base := locatedRef(testUID, secretLoc("a"))
	src := newSource(base)
	rec := mountRecord{FSType: "tmpfs", Source: src, UniqueID: 7, ID: 3, Dev: 9}
	mi := fsat.MountStat{UniqueID: 7, ID: 3, Dev: 9, Root: true}
	if !rec.provenBy(mi, "tmpfs", src, base) {
		t.Fatal("the record does not prove its own mount")
	}
	others := []volRef{
		locatedRef("another-pod", secretLoc("a")),
		locatedRef(testUID, Location{Plugin: "kubernetes.io/configmap", Dir: "a", Meta: "wrapped_a"}),
		locatedRef(testUID, Location{Plugin: secretPlugin, Dir: "b", Meta: "wrapped_a"}),
		locatedRef(testUID, Location{Plugin: secretPlugin, Dir: "a", Meta: "wrapped_b"}),
		ordinaryRef(testUID, "a"),
		ordinaryRef(testUID, "wrapped_a"),
	}
	for _, r := range others {
		if rec.provenBy(mi, "tmpfs", src, r) {
			t.Errorf("a's record proves a mount at %+v", r)
		}
	}
	osrc := newSource(ordinaryRef(testUID, "a"))
	orec := mountRecord{FSType: "tmpfs", Source: osrc, UniqueID: 7, ID: 3, Dev: 9}
	if orec.provenBy(mi, "tmpfs", osrc, base) {
		t.Error("an ordinary volume's record proves a located mount")
	}
}

// TestLocatedSymlinks: a symlink in place of the plugin's volumes
// directory or of the metadata directory is an error naming it, and
// nothing outside is touched; one in place of the volume directory is
// never followed (SetUp refuses it, TearDown unlinks it, as for an
// ordinary volume).
func TestLocatedSymlinks(t *testing.T) {
	mounttest.RequireMounts(t)
	loc := secretLoc("creds")
	for _, tc := range []struct {
		name     string
		link     func(e *env) string // where the symlink goes
		unlinked bool                // TearDown removes the symlink itself
	}{
		{"volumes/kubernetes.io~secret", func(e *env) string { return filepath.Dir(e.locDir(t, loc)) }, false},
		{"volume directory", func(e *env) string { return e.locDir(t, loc) }, true},
		{"metadata directory", func(e *env) string { return e.metaDir(t, loc.Meta) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, t.TempDir(), nil)
			outside := t.TempDir()
			target := outside
			if tc.name == "volumes/kubernetes.io~secret" {
				target = filepath.Join(outside, "plugin")
				mounttest.Sentinels(t, filepath.Join(target, "creds"))
			} else {
				mounttest.Sentinels(t, target)
			}
			want := mounttest.Snapshot(t, outside)
			link := tc.link(e)
			if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			spec := volume.Spec{Name: loc.Meta, EmptyDir: &volume.EmptyDirSource{Medium: "Memory"}}
			m, err := e.plugin.NewMounterAt(&spec, e.pod(), loc)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.SetUp(e.ctx, volume.MounterArgs{}); err == nil {
				t.Fatal("SetUp through a symlink succeeded")
			}
			mounttest.Intact(t, outside, want)
			err = e.tearDownAt(loc)
			switch {
			case tc.unlinked && err != nil:
				t.Fatalf("TearDown = %v", err)
			case tc.unlinked:
				mustNotExist(t, link)
			case err == nil:
				t.Fatal("TearDown through a symlink succeeded")
			}
			mounttest.Intact(t, outside, want)
			if isMounted(t, outside) {
				t.Error("something was mounted outside the root")
			}
		})
	}
}

// TestSourceFitsDfLine: a new mount source is at most 20 characters, the
// longest filesystem name busybox's df prints on the same line as its
// numbers (Kubernetes's "pod should support memory backed volumes of
// specified size" spec reads the size as df's second column), and proves
// its volume as the long form of earlier records still does.
func TestSourceFitsDfLine(t *testing.T) {
	r := ordinaryRef(testUID, "cache")
	other := ordinaryRef(testUID, "other")
	loc := locatedRef(testUID, Location{Plugin: secretPlugin, Dir: "cache", Meta: "wrapped_cache"})
	for i := 0; i < 100; i++ {
		s := newSource(r)
		if len(s) > 20 || !strings.HasPrefix(s, sourcePrefix) {
			t.Fatalf("newSource = %q (%d characters); want %s… of at most 20", s, len(s), sourcePrefix)
		}
		if !isNodevolSource(s) || !isSourceFor(s, r) || isSourceFor(s, other) || isSourceFor(s, loc) {
			t.Fatalf("source %q: nodevol %v, for its volume %v, for another %v, for a location %v", s, isNodevolSource(s), isSourceFor(s, r), isSourceFor(s, other), isSourceFor(s, loc))
		}
		if l := newSource(loc); len(l) > 20 || !isSourceFor(l, loc) || isSourceFor(l, r) {
			t.Fatalf("located source %q: for its location %v, for the ordinary volume %v", l, isSourceFor(l, loc), isSourceFor(l, r))
		}
	}
	long := sourceFor("0123456789abcdef", testUID, "cache")
	if !isNodevolSource(long) || !isSourceFor(long, r) || isSourceFor(long, other) {
		t.Errorf("the long form %q of earlier records: nodevol %v, for its volume %v, for another %v", long, isNodevolSource(long), isSourceFor(long, r), isSourceFor(long, other))
	}
	for _, s := range []string{"nv-0123456-01234567", "nv-0123456g-01234567", "nv-01234567_01234567", "nv-01234567-0123456789", "nodevol-emptydir-01234567-01234567", "tmpfs"} {
		if isNodevolSource(s) {
			t.Errorf("isNodevolSource(%q) = true", s)
		}
	}
}
