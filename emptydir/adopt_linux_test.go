package emptydir

// The adoption rule (WithAdoption): SetUp adopts the tmpfs or hugetlbfs
// the kubelet before nodevol mounted, and nothing else. Each refusal below
// fails without the check it names.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// stockNode is a kubelet root on which "the stock kubelet" (the test)
// sets up volumes before nodevol starts on it.
type stockNode struct {
	root   string
	layout volume.Layout
}

func newStockNode(t *testing.T) *stockNode {
	t.Helper()
	mounttest.RequireMounts(t)
	root := filepath.Join(t.TempDir(), "kubelet")
	l, err := volume.NewLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	return &stockNode{root: root, layout: l}
}

// volumeDir makes the volume directory of pod uid's volume vol (of plugin)
// and the kubelet's ready marker in its metadata directory meta, as the
// stock kubelet's SetUp leaves them, and returns the volume directory.
func (n *stockNode) volumeDir(t *testing.T, uid, plugin, vol, meta string) string {
	t.Helper()
	dir, err := n.layout.VolumeDir(uid, plugin, vol)
	if err != nil {
		t.Fatal(err)
	}
	metaDir, err := n.layout.PluginVolumeDir(uid, PluginName, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, metaDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(metaDir, readyFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// memoryVolume is the stock kubelet's Memory volume "cache" of the test
// pod: a tmpfs from "tmpfs" on its directory, with sentinel files.
func (n *stockNode) memoryVolume(t *testing.T) (dir string, sentinels map[string]string) {
	t.Helper()
	dir = n.volumeDir(t, testUID, PluginName, "cache", "cache")
	mounttest.Tmpfs(t, dir, "size=1m")
	return dir, mounttest.Sentinels(t, dir)
}

// nodevol starts nodevol on the node (its session opens), with adoption.
func (n *stockNode) nodevol(t *testing.T) (*env, *adoptions) {
	t.Helper()
	stop := make(chan struct{})
	reg := &adoptions{}
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	e := newEnv(t, n.root, nil, WithAdoption(Adoption{Stop: stop, Logger: logger, Adopted: reg.add}))
	t.Cleanup(func() {
		close(stop)
		<-e.plugin.adoption.sessions.done
	})
	return e, reg
}

func memoryPod(e *env) *volume.Pod {
	pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory", SizeLimit: 1 << 20}})
	pod.MemoryLimit = 64 << 20
	return pod
}

// adoptions counts the calls of Adoption.Adopted, by medium.
type adoptions struct {
	mu sync.Mutex
	n  map[volume.Medium]int
}

func (a *adoptions) add(m volume.Medium) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[volume.Medium]int{}
	}
	a.n[m]++
}

// adoptedCount is the number of adoptions reported, of any medium.
func adoptedCount(t *testing.T, a *adoptions) float64 {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	sum := 0
	for _, n := range a.n {
		sum += n
	}
	return float64(sum)
}

// TestAdoptStockKubeletsTmpfs: the stock kubelet's Memory volume, with a
// subPath bind of it, is adopted as it is (its files kept), recorded,
// counted once, in place at the next SetUp, planned as an adopted mount,
// and torn down as nodevol's own.
func TestAdoptStockKubeletsTmpfs(t *testing.T) {
	n := newStockNode(t)
	dir, want := n.memoryVolume(t)
	sub, err := n.layout.SubpathDir(testUID, "cache", "app", 0)
	if err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, filepath.Join(dir, "sub"), sub)
	e, reg := n.nodevol(t)
	pod := memoryPod(e)
	e.setUp(t, pod, "cache")
	mounttest.Intact(t, dir, want)
	rec, err := readMetadata(e.metaDir(t, "cache"))
	if err != nil || rec == nil || rec.Mount == nil || !rec.Mount.Adopted || rec.Mount.UniqueID != mounttest.UniqueMountID(t, dir) || rec.Mount.Source != "tmpfs" {
		t.Fatalf("record after adoption: %+v (mount %+v), %v", rec, rec.Mount, err)
	}
	e.setUp(t, pod, "cache") // in place: not adopted again
	if got := adoptedCount(t, reg); got != 1 {
		t.Errorf("adopted volumes counted: %v, want 1", got)
	}
	// The kubelet removes the subPath bind before the teardown.
	mounttest.Unmount(t, sub)
	plan, err := e.plugin.PlanTearDown(testUID, "cache", nil)
	if err != nil || plan.Code != ReasonAdoptedMount || plan.Action != ActionUnmountAndRemove {
		t.Fatalf("plan: %+v, %v", plan, err)
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, dir)
	mustNotExist(t, e.metaDir(t, "cache"))
}

// TestAdoptStockKubeletsLocatedTmpfs: a secret volume's tmpfs (an emptyDir
// at a location) is adopted too.
func TestAdoptStockKubeletsLocatedTmpfs(t *testing.T) {
	n := newStockNode(t)
	loc := Location{Plugin: "kubernetes.io/secret", Dir: "creds", Meta: "wrapped_creds"}
	dir := n.volumeDir(t, testUID, loc.Plugin, loc.Dir, loc.Meta)
	mounttest.Tmpfs(t, dir, "size=1m")
	want := mounttest.Sentinels(t, dir)
	e, reg := n.nodevol(t)
	e.setUpAt(t, loc, "Memory")
	mounttest.Intact(t, dir, want)
	if got := adoptedCount(t, reg); got != 1 {
		t.Errorf("adopted volumes counted: %v, want 1", got)
	}
	if err := e.tearDownAt(loc); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, dir)
}

// TestAdoptedVolumeKeepsNASSafe: a NAS (a bind of a directory of sentinel
// files) mounted inside an adopted volume stops its teardown as it stops
// one of nodevol's own volumes: nothing unmounted, the files intact.
func TestAdoptedVolumeKeepsNASSafe(t *testing.T) {
	n := newStockNode(t)
	dir, _ := n.memoryVolume(t)
	e, _ := n.nodevol(t)
	e.setUp(t, memoryPod(e), "cache")
	nas := filepath.Join(t.TempDir(), "nas")
	if err := os.Mkdir(nas, 0o755); err != nil {
		t.Fatal(err)
	}
	want := mounttest.Sentinels(t, nas)
	mounttest.Bind(t, nas, filepath.Join(dir, "nas"))
	err := e.tearDown("cache")
	if !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown with a NAS inside the adopted volume = %v, want a refusal", err)
	}
	if !mounttest.IsMountRoot(t, dir) {
		t.Error("the adopted tmpfs was unmounted with a NAS inside")
	}
	mounttest.Intact(t, nas, want)
}

// refusal is a mount SetUp must not adopt.
type refusal struct {
	name string
	// check is what fails without the check of the rule that refuses it.
	check string
	// before mounts what the stock kubelet (or an attacker) left, before
	// nodevol starts; after, what is mounted once it runs; both return
	// the directories whose files must stay intact.
	before, after func(t *testing.T, n *stockNode, dir string) []string
	medium        volume.StorageMedium
}

func TestAdoptionRefuses(t *testing.T) {
	tmpfsOn := func(t *testing.T, dir string) []string {
		mounttest.Tmpfs(t, dir, "size=1m")
		return []string{dir}
	}
	for _, tc := range []refusal{{
		name:  "tmpfs mounted after the watermark",
		check: "the session log",
		after: func(t *testing.T, n *stockNode, dir string) []string { return tmpfsOn(t, dir) },
	}, {
		name:  "bind of another pod's tmpfs",
		check: "no other mount of the superblock",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			other := n.volumeDir(t, victimUID, PluginName, "cache", "cache")
			mounttest.Tmpfs(t, other, "size=1m")
			mounttest.Bind(t, other, dir)
			return []string{other}
		},
	}, {
		// Whoever can write into pod directories renames, while nodevol
		// runs, the stock kubelet's tmpfs of another pod's volume into
		// this volume's place (RENAME_EXCHANGE of the two plugin
		// directories): no mount is made, and its unique ID is still
		// from before the watermark.
		name:  "another pod's tmpfs renamed into place after the watermark",
		check: "where the mount was when nodevol started",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			return tmpfsOn(t, n.volumeDir(t, victimUID, PluginName, "cache", "cache"))
		},
		after: func(t *testing.T, n *stockNode, dir string) []string {
			other, err := n.layout.VolumeDir(victimUID, PluginName, "cache")
			if err != nil {
				t.Fatal(err)
			}
			exchange := func() error {
				return unix.Renameat2(unix.AT_FDCWD, filepath.Dir(other), unix.AT_FDCWD, filepath.Dir(dir), unix.RENAME_EXCHANGE)
			}
			if err := exchange(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = exchange() }) // back where its cleanup unmounts it
			return []string{dir}
		},
	}, {
		name:  "two tmpfs stacked",
		check: "a single mount on the directory",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			tmpfsOn(t, dir)
			mounttest.Tmpfs(t, dir, "size=1m")
			return []string{dir}
		},
	}, {
		name:  "tmpfs on the volumes directory",
		check: "the volumes directory on the pod directory's mount",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			vols := filepath.Dir(dir)
			mounttest.Tmpfs(t, vols, "size=1m")
			if err := os.Mkdir(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			return tmpfsOn(t, dir)
		},
	}, {
		name:  "tmpfs with a mount beneath",
		check: "nothing beneath",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			tmpfsOn(t, dir)
			inner := filepath.Join(dir, "inner")
			mounttest.Tmpfs(t, inner, "size=1m")
			return []string{inner}
		},
	}, {
		name:  "bind of a directory of the kubelet root's filesystem",
		check: "type and source",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			src := filepath.Join(n.root, "data")
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
			mounttest.Bind(t, src, dir)
			return []string{src}
		},
	}, {
		name:  "tmpfs with a source of its own",
		check: "type and source",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			mounttest.Mount(t, "nas", dir, "tmpfs", 0, "size=1m")
			return []string{dir}
		},
	}, {
		name:  "part of a tmpfs",
		check: "the whole filesystem",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			other := filepath.Join(t.TempDir(), "other")
			mounttest.Tmpfs(t, other, "size=1m")
			part := filepath.Join(other, "part")
			if err := os.Mkdir(part, 0o755); err != nil {
				t.Fatal(err)
			}
			mounttest.Bind(t, part, dir)
			mounttest.Unmount(t, other) // only the bind of its part is left
			return []string{dir}
		},
	}, {
		name:   "hugetlbfs of another page size",
		check:  "the page size",
		medium: "HugePages-2Mi",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			mounttest.Mount(t, "nodev", dir, "hugetlbfs", 0, "pagesize=1G")
			return nil // no files on a hugetlbfs without huge pages
		},
	}, {
		name:  "without unique mount IDs",
		check: "unique mount IDs",
		before: func(t *testing.T, n *stockNode, dir string) []string {
			forceNoUniqueMountIDs = true
			t.Cleanup(func() { forceNoUniqueMountIDs = false })
			return tmpfsOn(t, dir)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newStockNode(t)
			dir := n.volumeDir(t, testUID, PluginName, "cache", "cache")
			var keep []string
			if tc.before != nil {
				keep = tc.before(t, n, dir)
			}
			e, reg := n.nodevol(t)
			if tc.after != nil {
				keep = tc.after(t, n, dir)
			}
			want := map[string]map[string]string{}
			for _, d := range keep {
				want[d] = mounttest.Sentinels(t, d)
			}
			medium := tc.medium
			if medium == "" {
				medium = "Memory"
			}
			pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: medium}})
			pod.MemoryLimit = 64 << 20
			pod.HugePages = map[int64]int64{2 << 20: 2 << 20}
			m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
			if err != nil {
				t.Fatal(err)
			}
			err = m.SetUp(e.ctx, volume.MounterArgs{})
			t.Logf("SetUp = %v", err)
			if err == nil {
				t.Errorf("SetUp adopted it: the rule's check of %s is missing", tc.check)
			}
			if rec, _ := readMetadata(e.metaDir(t, "cache")); rec != nil && rec.Mount != nil && rec.Mount.Adopted {
				t.Errorf("recorded as adopted: %+v", rec.Mount)
			}
			if got := adoptedCount(t, reg); got != 0 {
				t.Errorf("adopted volumes counted: %v", got)
			}
			if err := e.tearDown("cache"); err == nil {
				t.Error("TearDown of a mount that was not adopted succeeded")
			}
			for d, w := range want {
				mounttest.Intact(t, d, w)
			}
			if !strings.Contains(tc.name, "volumes directory") && !mounttest.IsMountRoot(t, dir) {
				t.Error("the mount on the volume directory is gone")
			}
		})
	}
}

// TestAdoptAgainAfterStockKubelet: nodevol, then the stock kubelet, then
// nodevol again on one boot: a volume the stock kubelet set up in between
// is adopted by the second nodevol; one set up while the first ran is
// not.
func TestAdoptAgainAfterStockKubelet(t *testing.T) {
	n := newStockNode(t)
	during := n.volumeDir(t, victimUID, PluginName, "cache", "cache")
	e1, _ := n.nodevol(t)
	mounttest.Tmpfs(t, during, "size=1m")
	if err := e1.plugin.adoption.sessions.heartbeat(); err != nil {
		t.Fatal(err)
	}
	kill(e1.plugin.adoption.sessions)
	dir, want := n.memoryVolume(t) // the stock kubelet's, between the two
	e2, reg := n.nodevol(t)
	e2.setUp(t, memoryPod(e2), "cache")
	mounttest.Intact(t, dir, want)
	victim := &volume.Pod{UID: victimUID, Namespace: "default", Name: "victim", MemoryLimit: 64 << 20,
		Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "Memory"}}}}
	m, err := e2.plugin.NewMounter(victim.Volume("cache"), victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(e2.ctx, volume.MounterArgs{}); err == nil {
		t.Error("a tmpfs mounted while the first nodevol ran was adopted")
	}
	if got := adoptedCount(t, reg); got != 1 {
		t.Errorf("adopted volumes counted: %v, want 1", got)
	}
}

// TestAdoptedMountBoundElsewhereIsNotTornDown: once adopted, the tmpfs is
// proven as the volume's own; a bind of it outside the pod's subPath
// directory (its data still reachable there) stops its teardown.
func TestAdoptedMountBoundElsewhereIsNotTornDown(t *testing.T) {
	n := newStockNode(t)
	dir, want := n.memoryVolume(t)
	e, _ := n.nodevol(t)
	e.setUp(t, memoryPod(e), "cache")
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	mounttest.Bind(t, dir, elsewhere)
	if err := e.tearDown("cache"); !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("TearDown with a bind of the adopted tmpfs elsewhere = %v, want a refusal", err)
	}
	if !mounttest.IsMountRoot(t, dir) {
		t.Error("the adopted tmpfs was unmounted while bound elsewhere")
	}
	mounttest.Intact(t, dir, want)
}

// TestForgedAdoptedRecord: nodevol.json is in the pod directory, where
// the attacker writes. A record claiming that a mount on the volume
// directory was adopted proves it only by the kernel's unique mount ID,
// of the kubelet's type and source, in this boot, alone on its
// superblock: a NAS, a ramfs named like a tmpfs, another pod's tmpfs
// bound in, or a record of another boot is never unmounted.
func TestForgedAdoptedRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mount func(t *testing.T, n *stockNode, dir string) (keep string)
		boot  string
	}{{
		name: "NAS",
		mount: func(t *testing.T, n *stockNode, dir string) string {
			nas := filepath.Join(t.TempDir(), "nas")
			if err := os.Mkdir(nas, 0o755); err != nil {
				t.Fatal(err)
			}
			mounttest.Bind(t, nas, dir)
			return nas
		},
	}, {
		name: "another pod's tmpfs bound in",
		mount: func(t *testing.T, n *stockNode, dir string) string {
			other := n.volumeDir(t, victimUID, PluginName, "cache", "cache")
			mounttest.Tmpfs(t, other, "size=1m")
			mounttest.Bind(t, other, dir)
			return other
		},
	}, {
		name: "a ramfs from tmpfs",
		mount: func(t *testing.T, n *stockNode, dir string) string {
			mounttest.Mount(t, "tmpfs", dir, "ramfs", 0, "")
			return dir
		},
	}, {
		name: "a record of another boot",
		boot: "00000000-0000-0000-0000-000000000000",
		mount: func(t *testing.T, n *stockNode, dir string) string {
			mounttest.Tmpfs(t, dir, "size=1m")
			return dir
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newStockNode(t)
			dir := n.volumeDir(t, testUID, PluginName, "cache", "cache")
			keep := tc.mount(t, n, dir)
			want := mounttest.Sentinels(t, keep)
			e, _ := n.nodevol(t)
			mi := mountOn(t, dir)
			boot := tc.boot
			if boot == "" {
				var err error
				if boot, err = bootID(); err != nil {
					t.Fatal(err)
				}
			}
			writeForged(t, e.metaDir(t, "cache"), &mountRecord{UniqueID: mi.UniqueID, ID: mi.ID, Dev: mi.Dev, FSType: "tmpfs", Source: "tmpfs", Adopted: true, BootID: boot})
			err := e.tearDown("cache")
			t.Logf("TearDown = %v", err)
			if err == nil || !mounttest.IsMountRoot(t, dir) {
				t.Error("TearDown unmounted a mount a forged record claims was adopted")
			}
			mounttest.Intact(t, keep, want)
		})
	}
}

// mountOn is the identity of the mount on dir.
func mountOn(t *testing.T, dir string) fsat.MountStat {
	t.Helper()
	mi, err := fsat.StatMount(unix.AT_FDCWD, dir, bothIDs)
	if err != nil {
		t.Fatal(err)
	}
	return mi
}

// TestAdoptStockKubeletsHugetlbfs: the stock kubelet's HugePages volume, a
// hugetlbfs from "nodev" of the volume's page size, is adopted and torn
// down as nodevol's own.
func TestAdoptStockKubeletsHugetlbfs(t *testing.T) {
	n := newStockNode(t)
	dir := n.volumeDir(t, testUID, PluginName, "cache", "cache")
	mounttest.Mount(t, "nodev", dir, "hugetlbfs", 0, "pagesize=2M")
	e, reg := n.nodevol(t)
	pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{Medium: "HugePages-2Mi"}})
	pod.HugePages = map[int64]int64{2 << 20: 2 << 20}
	e.setUp(t, pod, "cache")
	rec, err := readMetadata(e.metaDir(t, "cache"))
	if err != nil || rec == nil || rec.Mount == nil || !rec.Mount.Adopted || rec.Mount.FSType != "hugetlbfs" || rec.HugePageSize != 2<<20 {
		t.Fatalf("record after adoption: %+v, %v", rec, err)
	}
	if got := adoptedCount(t, reg); got != 1 {
		t.Errorf("adopted volumes counted: %v, want 1", got)
	}
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, dir)
}
