package emptydir

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// scanListed lists e's root with volume.Layout.ScanVolumes and hands every
// plugin directory to fn, checking that what the listing lends is still
// open when fn returns, on the directory it was open on (a number closed
// and taken again by another open would still be open).
func (e *env) scanListed(t *testing.T, fn func(pd volume.PluginDir)) {
	t.Helper()
	_, err := e.layout.ScanVolumes(volume.WithPluginDir(func(pd volume.PluginDir) {
		var lent [2]unix.Stat_t
		fds := []int{pd.Fd, pd.Pod}
		for i, fd := range fds {
			if err := unix.Fstat(fd, &lent[i]); err != nil {
				t.Fatalf("a descriptor the listing lends (%d, %s): %v", fd, pd.Rel, err)
			}
		}
		fn(pd)
		for i, fd := range fds {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				t.Errorf("a descriptor the listing lent (%d, %s) was closed: %v", fd, pd.Rel, err)
			} else if st.Ino != lent[i].Ino || st.Dev != lent[i].Dev {
				t.Errorf("a descriptor the listing lent (%d, %s) was closed and its number taken by another open", fd, pd.Rel)
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
}

// volumeDir is the path of the pod's emptyDir volume name.
func (e *env) volumeDir(t *testing.T, name string) string {
	t.Helper()
	d, err := e.layout.VolumeDir(testUID, PluginName, name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestPlanListedIsPlanTearDown: the plans PlanListed makes through the
// listing's descriptors are PlanTearDown's, for every kind of volume
// directory and metadata a pod directory can hold; it keeps no descriptor
// past the call and closes none it borrowed.
func TestPlanListedIsPlanTearDown(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	pod := e.pod(emptyDirSpec("cache", volume.StorageMediumDefault), emptyDirSpec("planted", volume.StorageMediumDefault),
		emptyDirSpec("other-record", volume.StorageMediumDefault))
	for _, name := range []string{"cache", "planted", "other-record"} {
		e.setUp(t, pod, name)
	}
	vols := filepath.Dir(e.volumeDir(t, "cache"))
	for _, mk := range []func() error{
		// A directory the kubelet made, with only its ready marker (a
		// stock kubelet's), and one with no metadata at all.
		func() error { return os.Mkdir(filepath.Join(vols, "stock"), 0o750) },
		func() error { return os.MkdirAll(e.metaDir(t, "stock"), 0o750) },
		func() error { return os.WriteFile(filepath.Join(e.metaDir(t, "stock"), readyFileName), nil, 0o600) },
		func() error { return os.Mkdir(filepath.Join(vols, "bare"), 0o750) },
		// A symlink and a file where volumes belong.
		func() error { return os.Symlink("/etc", filepath.Join(vols, "link")) },
		func() error { return os.WriteFile(filepath.Join(vols, "file"), []byte("x"), 0o600) },
		// Something neither nodevol nor the kubelet writes in a metadata
		// directory, and another volume's record.
		func() error { return os.Mkdir(filepath.Join(e.metaDir(t, "planted"), "planted"), 0o750) },
		func() error {
			b, err := os.ReadFile(filepath.Join(e.metaDir(t, "cache"), metaFileName))
			if err != nil {
				return err
			}
			var forged []byte
			forged = append(forged, b[:len(b)-2]...) // "}\n"
			forged = append(forged, `,"location":{"podUID":"x","plugin":"kubernetes.io/secret","dir":"d","meta":"m"}}`...)
			return os.WriteFile(filepath.Join(e.metaDir(t, "other-record"), metaFileName), append(forged, '\n'), 0o600)
		},
	} {
		if err := mk(); err != nil {
			t.Fatal(err)
		}
	}
	if planned := e.planBothWays(t, e, nil); planned != 7 {
		t.Errorf("%d volumes planned, want 7", planned)
	}
}

// TestPlanListedOtherPluginByName: a plugin directory that is not an
// emptyDir one is planned as PlanTearDown plans its volumes, by name.
func TestPlanListedOtherPluginByName(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	e.setUp(t, e.pod(emptyDirSpec("cache", volume.StorageMediumDefault)), "cache")
	if err := os.MkdirAll(filepath.Join(e.root, "pods", testUID, "volumes", "kubernetes.io~secret", "cache"), 0o750); err != nil {
		t.Fatal(err)
	}
	pl := e.plugin.NewPlanner()
	defer pl.Close()
	var codes []string
	e.scanListed(t, func(pd volume.PluginDir) {
		if pd.Volumes[0].Plugin == PluginName {
			return
		}
		pl.PlanListed(pd, nil, func(_ int, plan Plan, err error) {
			codes = append(codes, fmt.Sprint(plan.Code, err))
		})
	})
	// By name, PlanTearDown's answer: the emptyDir "cache" is there.
	if want := []string{"not-mounted <nil>"}; !reflect.DeepEqual(codes, want) {
		t.Errorf("planned %q, want %q", codes, want)
	}
}

// TestPlanListedPodDirectoryExchanged: while a scan lists a pod and the
// Planner plans its emptyDirs through the descriptors the listing lends,
// the pod directory is exchanged with a decoy of the same shape beside it,
// thousands of times (RENAME_EXCHANGE). The decoy has another volume, and
// in each pod directory the metadata directory named after the other's
// volume holds something that makes a plan fail: a plan that took one pod
// directory's volume and the other's metadata (the pod directory resolved
// by name again) says so, as does one that looks for the listed volume in
// the other (missing there). Every plan must be of the pod
// directory that was listed, and nothing may change: the volumes' data and
// records are compared byte for byte at the end.
func TestPlanListedPodDirectoryExchanged(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	podDir := filepath.Join(e.root, "pods", testUID)
	decoy := filepath.Join(e.root, "decoy")
	// The decoy first: a pod directory with the volume "other", moved out.
	e.setUp(t, e.pod(emptyDirSpec("other", volume.StorageMediumDefault)), "other")
	if err := os.WriteFile(filepath.Join(e.volumeDir(t, "other"), "data"), []byte("the decoy's data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.metaDir(t, "cache"), "planted"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(podDir, decoy); err != nil {
		t.Fatal(err)
	}
	// The pod listed: the volume "cache".
	e.setUp(t, e.pod(emptyDirSpec("cache", volume.StorageMediumDefault)), "cache")
	if err := os.WriteFile(filepath.Join(e.volumeDir(t, "cache"), "data"), []byte("the pod's data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.metaDir(t, "other"), "planted"), 0o750); err != nil {
		t.Fatal(err)
	}
	// Each pod's files at rest (the volume's data and its record), to
	// compare at the end.
	files := map[string][]byte{}
	for dir, name := range map[string]string{podDir: "cache", decoy: "other"} {
		for _, f := range []string{"volumes/kubernetes.io~empty-dir/" + name + "/data", "plugins/kubernetes.io~empty-dir/" + name + "/" + metaFileName} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			files[filepath.Join(dir, f)] = b
		}
	}
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}

	exchanges := mounttest.ExchangeFlicker(podDir, decoy)
	pl := e.plugin.NewPlanner()
	defer pl.Close()
	seen := map[string]int{}
	const iterations = 4000
	before := openFds(t)
	for i := 0; i < iterations && !t.Failed(); i++ {
		e.scanListed(t, func(pd volume.PluginDir) {
			pl.PlanListed(pd, tab, func(j int, plan Plan, err error) {
				vd := pd.Volumes[j]
				seen[vd.Volume]++
				if err != nil || plan.metaErr != nil || plan.meta == nil || plan.Action != ActionRemove || plan.Code != ReasonNotMounted || plan.Path != vd.Path {
					t.Errorf("scan %d: the volume %s listed was planned with another pod directory's: %v, %s %s %q (record %v, %v)",
						i, vd.Path, err, plan.Action, plan.Code, plan.Reason, plan.meta != nil, plan.metaErr)
				}
			})
		})
	}
	pl.Close() // the root and pods directory it opened for itself
	after := openFds(t)
	exchanges.Stop(t)
	if after != before {
		t.Errorf("%d descriptors open after the scans, %d before", after, before)
	}
	// Back at rest, whichever way round the last exchange left them.
	if _, err := os.Stat(filepath.Join(podDir, "volumes/kubernetes.io~empty-dir/cache")); err != nil {
		if err := unix.Renameat2(unix.AT_FDCWD, podDir, unix.AT_FDCWD, decoy, unix.RENAME_EXCHANGE); err != nil {
			t.Fatal(err)
		}
	}
	for path, want := range files {
		if got, err := os.ReadFile(path); err != nil || string(got) != string(want) {
			t.Errorf("%s changed: %q, %v; want %q", path, got, err, want)
		}
	}
	t.Logf("%d scans, %d exchanges, volumes planned: %v", iterations, exchanges.Count(), seen)
	if exchanges.Count() == 0 || seen["cache"] == 0 || seen["other"] == 0 {
		t.Fatal("the pod directory was never listed both ways: the race was not run")
	}
}

// TestPlanListedUnsetPodPlansByName: a PluginDir made by hand with Pod
// left unset holds descriptor 0, standard input or whatever a process
// that closed it opened in its place (here: another pod's directory).
// PlanListed must not borrow it for the pod directory: it plans
// by name, as PlanTearDown does.
func TestPlanListedUnsetPodPlansByName(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	e.setUp(t, e.pod(emptyDirSpec("cache", volume.StorageMediumDefault)), "cache")
	// The other pod's directory holds a metadata directory of the same
	// volume with what nodevol never writes there: a plan through it fails.
	other := t.TempDir()
	if err := os.MkdirAll(filepath.Join(other, "plugins", "kubernetes.io~empty-dir", "cache", "junk"), 0o750); err != nil {
		t.Fatal(err)
	}
	decoy, err := unix.Open(other, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(decoy)
	stdin, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Dup2(stdin, 0); err != nil {
			t.Error(err)
		}
		unix.Close(stdin)
	}()
	if err := unix.Dup2(decoy, 0); err != nil {
		t.Fatal(err)
	}
	pl := e.plugin.NewPlanner()
	defer pl.Close()
	var codes []string
	e.scanListed(t, func(pd volume.PluginDir) {
		pd.Pod = 0
		pl.PlanListed(pd, nil, func(_ int, plan Plan, err error) {
			codes = append(codes, fmt.Sprint(plan.Code, err))
		})
	})
	if want := []string{"not-mounted <nil>"}; !reflect.DeepEqual(codes, want) {
		t.Errorf("planned %q, want %q (PlanTearDown's, by name)", codes, want)
	}
}

// TestPlanListedWithoutItsOwnRoot: a Planner that cannot open a kubelet
// root of its own (its plugin's is missing: the tree the borrowed
// directories would join) plans a listing's volumes through the
// descriptors the listing lends all the same, as PlanTearDown plans them
// by name from the root listed; it closes none of them and is left
// holding nothing.
func TestPlanListedWithoutItsOwnRoot(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	pod := e.pod(emptyDirSpec("cache", volume.StorageMediumDefault), emptyDirSpec("mem", volume.StorageMediumDefault))
	for _, name := range []string{"cache", "mem"} {
		e.setUp(t, pod, name)
	}
	// A record that is not the volume's: the plan must have read it.
	if err := os.WriteFile(filepath.Join(e.metaDir(t, "mem"), metaFileName), []byte("not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := newEnv(t, filepath.Join(t.TempDir(), "missing"), nil)
	if planned := e.planBothWays(t, elsewhere, nil); planned != 2 {
		t.Errorf("%d volumes planned without a root of its own, want 2", planned)
	}
}

// TestPlannerWithoutPodsDirectoryPlansLaterPodsByName: a Planner whose
// first PlanListed finds no pods directory under its root (renamed away
// while the listing held its descriptors) keeps nothing of that root:
// once the pods directory is back, its plans by name find the volumes.
func TestPlannerWithoutPodsDirectoryPlansLaterPodsByName(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	pod := e.pod(emptyDirSpec("cache", volume.StorageMediumDefault))
	e.setUp(t, pod, "cache")
	pods, away := filepath.Join(e.root, "pods"), filepath.Join(e.root, "pods.away")
	pl := e.plugin.NewPlanner()
	defer pl.Close()
	e.scanListed(t, func(pd volume.PluginDir) {
		if err := os.Rename(pods, away); err != nil {
			t.Fatal(err)
		}
		pl.PlanListed(pd, nil, func(int, Plan, error) {})
		if err := os.Rename(away, pods); err != nil {
			t.Fatal(err)
		}
	})
	plan, err := pl.PlanTearDown(testUID, "cache", nil)
	if err != nil || plan.Code != ReasonNotMounted || !plan.Exists {
		t.Errorf("PlanTearDown after the pods directory came back = %+v, %v; want the volume, %s", plan, err, ReasonNotMounted)
	}
}

// planBothWays plans every emptyDir volume e lists, with the mount table
// and with none: through the listing's descriptors with PlanListed of a
// new Planner of by's plugin, and by name with PlanTearDown of one of
// e's. It reports any difference in error, record or plan, hands each
// listed plan to check (nil: none), and checks that no descriptor is
// left open. It returns how many volumes the last pass planned.
func (e *env) planBothWays(t *testing.T, by *env, check func(vd volume.VolumeDir, got Plan)) int {
	t.Helper()
	table, err := mountdetect.ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	planned := 0
	for _, tab := range []*mountdetect.MountTable{table, nil} {
		byName := e.plugin.NewPlanner()
		listed := by.plugin.NewPlanner()
		before := openFds(t)
		planned = 0
		e.scanListed(t, func(pd volume.PluginDir) {
			listed.PlanListed(pd, tab, func(i int, got Plan, gotErr error) {
				planned++
				vd := pd.Volumes[i]
				want, wantErr := byName.PlanTearDown(vd.PodUID, vd.Volume, tab)
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
					t.Errorf("%s: PlanListed's error %v, PlanTearDown's %v", vd.Volume, gotErr, wantErr)
				}
				if fmt.Sprint(got.metaErr) != fmt.Sprint(want.metaErr) || !reflect.DeepEqual(got.meta, want.meta) {
					t.Errorf("%s: PlanListed read the record %+v (%v), PlanTearDown %+v (%v)", vd.Volume, got.meta, got.metaErr, want.meta, want.metaErr)
				}
				if check != nil {
					check(vd, got)
				}
				got.meta, want.meta, got.metaErr, want.metaErr = nil, nil, nil, nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: PlanListed planned\n%+v\nPlanTearDown\n%+v", vd.Volume, got, want)
				}
			})
		})
		listed.Close()
		byName.Close()
		if after := openFds(t); after != before {
			t.Errorf("%d descriptors open after PlanListed, %d before", after, before)
		}
	}
	return planned
}
