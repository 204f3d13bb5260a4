package reconciler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/executor"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// faultyPlugin is emptyDir with a TearDown that can fail, panic or hang,
// and that counts concurrent operations per volume.
type faultyPlugin struct {
	*emptydir.Plugin
	failTearDowns atomic.Int32 // fail this many TearDowns, then behave
	panicOnce     atomic.Bool
	hang          atomic.Bool
	tearDowns     atomic.Int32
	running       sync.Map // pod/volume → *atomic.Int32
	overlaps      atomic.Int32
	gates         sync.Map // uid/volume → chan struct{}: that TearDown waits until it is closed
	afterTearDown func()   // called after a TearDown that succeeded
}

type faultyUnmounter struct {
	volume.Unmounter
	p   *faultyPlugin
	key string
}

func (p *faultyPlugin) NewUnmounter(vol, uid string) (volume.Unmounter, error) {
	u, err := p.Plugin.NewUnmounter(vol, uid)
	if err != nil {
		return nil, err
	}
	return &faultyUnmounter{Unmounter: u, p: p, key: uid + "/" + vol}, nil
}

func (u *faultyUnmounter) TearDown(ctx context.Context) error {
	c, _ := u.p.running.LoadOrStore(u.key, new(atomic.Int32))
	if c.(*atomic.Int32).Add(1) > 1 {
		u.p.overlaps.Add(1)
	}
	defer c.(*atomic.Int32).Add(-1)
	u.p.tearDowns.Add(1)
	if g, ok := u.p.gates.Load(u.key); ok {
		<-g.(chan struct{})
	}
	if u.p.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if u.p.panicOnce.CompareAndSwap(true, false) {
		panic("plugin bug")
	}
	if u.p.failTearDowns.Add(-1) >= 0 {
		return errors.New("injected TearDown failure")
	}
	if err := u.Unmounter.TearDown(ctx); err != nil {
		return err
	}
	if u.p.afterTearDown != nil {
		u.p.afterTearDown()
	}
	return nil
}

type testEnv struct {
	t      *testing.T
	root   string
	layout volume.Layout
	plugin *faultyPlugin
	reg    *prometheus.Registry
	m      *Manager
	cancel context.CancelFunc
	done   chan struct{}
}

// startManager starts a Manager for a test that runs in a synctest bubble
// (synctest.Test): time is the bubble's, synctest.Wait is the barrier
// ("everything that can run has run", never a sleep), and synctest.Test is
// the goroutine-leak check — after the test and its cleanups (which stop
// the Manager and wait for Run), any goroutine left blocked fails it.
func startManager(t *testing.T, root string, opts Options) *testEnv {
	t.Helper()
	l, err := volume.NewLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, root: root, layout: l, reg: prometheus.NewRegistry()}
	e.plugin = &faultyPlugin{Plugin: emptydir.New(volume.NewHost(l, nil, 0))}
	opts.Root = root
	opts.Plugins = []volume.Plugin{e.plugin}
	opts.Registerer = e.reg
	if opts.InitialBackoff == 0 {
		opts.InitialBackoff, opts.MaxBackoff = time.Millisecond, 10*time.Millisecond
	}
	e.m, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, e.cancel = context.WithCancel(ctx)
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.m.Run(ctx); err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	t.Cleanup(e.stop)
	return e
}

// goRun runs m.Run in the background with a test logger: cancel stops
// it, result receives what Run returned, and the test's cleanup stops it
// and waits for it.
func goRun(t *testing.T, m *Manager) (cancel context.CancelFunc, result <-chan error) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel = context.WithCancel(ctx)
	res := make(chan error, 1)
	exited := make(chan struct{})
	go func() { res <- m.Run(ctx); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	return cancel, res
}

// newDeviceManager is a Manager whose only plugin is a devicePlugin
// (volume-wide operations; pod a's SetUp waits at the plugin's gate).
func newDeviceManager(t *testing.T) (*Manager, *devicePlugin) {
	l, _ := volume.NewLayout(t.TempDir())
	p := &devicePlugin{Plugin: emptydir.New(volume.NewHost(l, nil, 0)), gate: make(chan struct{})}
	m, err := New(Options{Plugins: []volume.Plugin{p}, ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return m, p
}

func (e *testEnv) stop() {
	e.cancel()
	<-e.done
}

func pod(uid string, vols ...string) *volume.Pod {
	p := &volume.Pod{UID: uid, Namespace: "default", Name: "pod-" + uid}
	for _, v := range vols {
		p.Volumes = append(p.Volumes, volume.Spec{Name: v, EmptyDir: &volume.EmptyDirSource{}})
	}
	return p
}

func (e *testEnv) volDir(uid, vol string) string {
	d, _ := e.layout.VolumeDir(uid, emptydir.PluginName, vol)
	return d
}

func waitCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestMountAndUnmount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{})
		if err := e.m.AddPod(pod("p1", "cache", "scratch")); err != nil {
			t.Fatal(err)
		}
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p1"); err != nil {
			t.Fatal(err)
		}
		mv := e.m.MountedVolumes("p1")
		if len(mv) != 2 || mv[0].State != StateMounted {
			t.Fatalf("MountedVolumes = %+v", mv)
		}
		if !exists(e.volDir("p1", "cache")) || !exists(e.volDir("p1", "scratch")) {
			t.Fatal("volume directories missing")
		}
		if err := e.m.WaitForMount(waitCtx(t, time.Second), "nope"); !errors.Is(err, ErrPodNotFound) {
			t.Errorf("WaitForMount(unknown pod) = %v", err)
		}

		if err := e.m.WaitForPodRemoval(waitCtx(t, time.Second), "p1"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "RemovePod was not called") {
			t.Errorf("WaitForPodRemoval(wanted pod) = %v; want a timeout saying the pod is still wanted", err)
		}

		// Sources not ready: removing the pod tears nothing down.
		e.m.RemovePod("p1")
		if err := e.m.WaitForUnmount(waitCtx(t, 200*time.Millisecond), "p1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitForUnmount before sources are ready = %v; want a timeout", err)
		}
		if err := e.m.WaitForPodRemoval(waitCtx(t, time.Second), "p1"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "MarkSourcesReady was not called") {
			t.Errorf("WaitForPodRemoval before sources are ready = %v; want a timeout saying so", err)
		}
		if !exists(e.volDir("p1", "cache")) {
			t.Fatal("volume torn down before sources were ready")
		}
		e.m.MarkSourcesReady()
		if err := e.m.WaitForUnmount(waitCtx(t, 10*time.Second), "p1"); err != nil {
			t.Fatal(err)
		}
		if err := e.m.WaitForPodRemoval(waitCtx(t, 10*time.Second), "p1"); err != nil {
			t.Fatal(err)
		}
		if podDir, _ := e.layout.PodDir("p1"); exists(podDir) {
			t.Errorf("pod directory %s not removed", podDir)
		}
		if err := e.m.WaitForPodRemoval(waitCtx(t, time.Second), "../x"); !errors.Is(err, volume.ErrInvalidName) {
			t.Errorf("WaitForPodRemoval(bad uid) = %v", err)
		}
		if got := testutil.ToFloat64(e.m.metrics.volumes.WithLabelValues(emptydir.PluginName, "mounted")); got != 0 {
			t.Errorf("mounted gauge = %v; want 0", got)
		}
		if n, err := testutil.GatherAndCount(e.reg, "nodevol_volume_operation_duration_seconds"); err != nil || n < 2 {
			t.Errorf("operation histogram series = %d, %v", n, err)
		}
	})
}

func TestRestartReconstruction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		e1 := startManager(t, root, Options{})
		for _, uid := range []string{"keep", "gone"} {
			if err := e1.m.AddPod(pod(uid, "cache")); err != nil {
				t.Fatal(err)
			}
			if err := e1.m.WaitForMount(waitCtx(t, 10*time.Second), uid); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(e1.volDir("keep", "cache"), "data"), []byte("x"), 0o644)
		// Things reconstruction must report and leave alone.
		os.MkdirAll(filepath.Join(root, "pods/other/volumes/example.com~unknown/v"), 0o755)
		os.MkdirAll(filepath.Join(root, "pods/bad/volumes/a~b~c/v"), 0o755)
		e1.stop() // "crash": nothing is torn down

		e2 := startManager(t, root, Options{})
		<-e2.m.Reconstructed() // a deadlock fails the bubble
		if mv := e2.m.MountedVolumes("gone"); len(mv) != 1 || mv[0].State != StateUncertain {
			t.Fatalf("reconstructed = %+v; want one uncertain volume", mv)
		}
		probs := e2.m.Problems()
		var paths []string
		for _, p := range probs {
			paths = append(paths, strings.TrimPrefix(p.Path, root+"/"))
		}
		if got := strings.Join(paths, " "); !strings.Contains(got, "pods/bad/volumes/a~b~c") || !strings.Contains(got, "pods/other/volumes/example.com~unknown/v") {
			t.Errorf("problems = %s", got)
		}
		// Sources not ready yet: nothing is torn down even after a while (an
		// hour of the bubble's time: every resync pass in it has run).
		time.Sleep(time.Hour)
		synctest.Wait()
		if !exists(e2.volDir("gone", "cache")) {
			t.Fatal("torn down before sources were ready")
		}
		// The kubelet re-adds the pod it still runs; its volume is verified.
		if err := e2.m.AddPod(pod("keep", "cache")); err != nil {
			t.Fatal(err)
		}
		if err := e2.m.WaitForMount(waitCtx(t, 10*time.Second), "keep"); err != nil {
			t.Fatal(err)
		}
		e2.m.MarkSourcesReady()
		if err := e2.m.WaitForUnmount(waitCtx(t, 10*time.Second), "gone"); err != nil {
			t.Fatal(err)
		}
		if exists(e2.volDir("gone", "cache")) {
			t.Error("orphaned volume not torn down")
		}
		if b, err := os.ReadFile(filepath.Join(e2.volDir("keep", "cache"), "data")); err != nil || string(b) != "x" {
			t.Errorf("wanted volume lost its data: %q %v", b, err)
		}
		if !exists(filepath.Join(root, "pods/other/volumes/example.com~unknown/v")) {
			t.Error("unknown plugin's directory was touched")
		}
	})
}

func TestTearDownFailuresRetryWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{})
		e.plugin.failTearDowns.Store(3)
		e.m.MarkSourcesReady()
		if err := e.m.AddPod(pod("p", "cache")); err != nil {
			t.Fatal(err)
		}
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		e.m.RemovePod("p")
		if err := e.m.WaitForUnmount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatalf("WaitForUnmount = %v", err)
		}
		if n := e.plugin.tearDowns.Load(); n != 4 {
			t.Errorf("TearDown ran %d times; want 4 (3 failures, then success)", n)
		}
		if e.plugin.overlaps.Load() != 0 {
			t.Error("two TearDowns of one volume overlapped")
		}
	})
}

func TestTearDownPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{})
		e.plugin.panicOnce.Store(true)
		e.m.MarkSourcesReady()
		e.m.AddPod(pod("p", "cache"))
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		e.m.RemovePod("p")
		if err := e.m.WaitForUnmount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatalf("WaitForUnmount after a panic = %v", err)
		}
	})
}

func TestTearDownHangsUntilStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{})
		e.plugin.hang.Store(true)
		e.m.MarkSourcesReady()
		e.m.AddPod(pod("p", "cache"))
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		e.m.RemovePod("p")
		if err := e.m.WaitForUnmount(waitCtx(t, 200*time.Millisecond), "p"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitForUnmount = %v; want a timeout while TearDown hangs", err)
		}
		e.stop() // cancels the hanging TearDown's context
		if err := e.m.x.Operations().Wait(waitCtx(t, 5*time.Second)); err != nil {
			t.Fatalf("hanging operation did not end with the context: %v", err)
		}
	})
}

// TestNestedMountRefusal: a NAS inside an emptyDir, the pod deleted: the
// teardown is refused with backoff retries, WaitForUnmount says why, the
// NAS is intact; once the NAS is unmounted the teardown completes.
func TestNestedMountRefusal(t *testing.T) {
	mounttest.RequireMounts(t)
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
		e.m.MarkSourcesReady()
		e.m.AddPod(pod("p", "cache"))
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		nas := filepath.Join(e.volDir("p", "cache"), "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		snap := mounttest.Sentinels(t, nas)
		e.m.RemovePod("p")
		err := e.m.WaitForUnmount(waitCtx(t, 300*time.Millisecond), "p")
		var crossing *mountdetect.CrossesMountError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &crossing) || crossing.Mounts[0].MountPoint != nas {
			t.Fatalf("WaitForUnmount = %v; want a timeout that names the NAS", err)
		}
		if n := testutil.ToFloat64(e.m.metrics.refused.WithLabelValues(emptydir.PluginName)); n < 2 {
			t.Errorf("refused teardowns = %v; want retries (≥2)", n)
		}
		if mv := e.m.MountedVolumes("p"); len(mv) != 1 || mv[0].State != StateUncertain {
			t.Errorf("volume state = %+v; want uncertain", mv)
		}
		mounttest.Intact(t, nas, snap)
		mounttest.Unmount(t, nas)
		if err := e.m.WaitForUnmount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatalf("WaitForUnmount after the NAS is gone = %v", err)
		}
	})
}

// TestChurn: 1,000 pods added and removed concurrently; every volume ends
// unmounted and no two operations ever ran on one key at once.
func TestChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, mounttest.MemTempDir(t), Options{})
		e.m.MarkSourcesReady()
		const pods = 1000
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < pods; i += 4 {
					uid := fmt.Sprintf("pod-%04d", i)
					if err := e.m.AddPod(pod(uid, "a", "b")); err != nil {
						t.Error(err)
						return
					}
					if i%3 == 0 {
						e.m.RemovePod(uid) // removed before it is even mounted
					}
				}
			})
		}
		wg.Wait()
		for i := range pods {
			e.m.RemovePod(fmt.Sprintf("pod-%04d", i))
		}
		for i := range pods {
			if err := e.m.WaitForUnmount(waitCtx(t, 30*time.Second), fmt.Sprintf("pod-%04d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.m.x.Operations().Wait(waitCtx(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		if n := e.plugin.overlaps.Load(); n != 0 {
			t.Errorf("%d overlapping TearDowns on one key", n)
		}
		for i := range pods {
			if err := e.m.WaitForPodRemoval(waitCtx(t, 30*time.Second), fmt.Sprintf("pod-%04d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if entries, _ := os.ReadDir(filepath.Join(e.root, "pods")); len(entries) != 0 {
			t.Errorf("%d pod directories left", len(entries))
		}
	})
}

func TestAddPodErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{})
		if err := e.m.AddPod(&volume.Pod{UID: "../x"}); !errors.Is(err, volume.ErrInvalidName) {
			t.Errorf("AddPod(bad uid) = %v", err)
		}
		if err := e.m.AddPod(&volume.Pod{UID: "p", Volumes: []volume.Spec{{Name: "v", Other: 1}}}); !errors.Is(err, volume.ErrPluginNotFound) {
			t.Errorf("AddPod(no plugin) = %v", err)
		}
		if _, err := New(Options{Root: "relative", Plugins: []volume.Plugin{e.plugin}}); !errors.Is(err, volume.ErrInvalidRoot) {
			t.Errorf("New(relative root) = %v; want ErrInvalidRoot", err)
		}
	})
}

// TestPodDirCleanupKeepsOtherPluginsMetadata: a pod whose emptyDir is torn
// down still has a volume of a plugin this Manager does not serve on disk.
// Its volumes/ directory cannot be removed, so nothing else of the pod
// directory may be: the other plugin's metadata under plugins/ must stay.
func TestPodDirCleanupKeepsOtherPluginsMetadata(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{})
		e.m.MarkSourcesReady()
		if err := e.m.AddPod(pod("p", "cache")); err != nil {
			t.Fatal(err)
		}
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		podDir, _ := e.layout.PodDir("p")
		meta := filepath.Join(podDir, "plugins/example.com~csi/v/vol_data.json")
		mounttest.Build(t, podDir,
			"dir volumes/example.com~csi/v",
			"file plugins/example.com~csi/v/vol_data.json {\"volumeHandle\":\"h\"}",
			"file volume-subpaths/v/ctr/keep data",
		)
		e.m.RemovePod("p")
		if err := e.m.WaitForUnmount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		if err := e.m.x.Operations().Wait(waitCtx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// The loop reaches the pod-directory cleanup (after the unmount's
		// completion marks the pod dirty), which cannot finish: the removal
		// wait times out, saying why.
		err := e.m.WaitForPodRemoval(waitCtx(t, 5*time.Second), "p")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "example.com~csi") {
			t.Errorf("WaitForPodRemoval = %v; want a timeout naming the directory left", err)
		}
		if !exists(meta) {
			t.Fatalf("%s removed while the volume it describes is still on disk", meta)
		}
		if !exists(filepath.Join(podDir, "volume-subpaths/v/ctr/keep")) {
			t.Error("volume-subpaths of a volume still on disk removed")
		}
		if !exists(filepath.Join(podDir, "volumes/example.com~csi/v")) {
			t.Error("the other plugin's volume directory was removed")
		}
	})
}

// TestLeftoverPodDirRemovedAfterSourcesReady: a pod directory with no
// volume left, found at start-up before sources are ready, is removed once
// MarkSourcesReady is called (it is in neither state of world, so a full
// pass alone would never visit it).
func TestLeftoverPodDirRemovedAfterSourcesReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		mounttest.Build(t, root, "file pods/left/plugins/kubernetes.io~empty-dir/v/ready ", "dir pods/left/volumes/kubernetes.io~empty-dir")
		e := startManager(t, root, Options{})
		podDir, _ := e.layout.PodDir("left")
		time.Sleep(time.Minute) // the bubble's time: passes and resyncs run before sources are ready
		synctest.Wait()
		if !exists(podDir) {
			t.Fatal("leftover pod directory removed before sources were ready")
		}
		e.m.MarkSourcesReady()
		if err := e.m.WaitForPodRemoval(waitCtx(t, 3*time.Second), "left"); err != nil || exists(podDir) {
			t.Errorf("leftover pod directory %s never removed after MarkSourcesReady: %v", podDir, err)
		}
	})
}

// TestWaitForUnmountKeepsRefusalAfterOtherVolumeSucceeds: a pod with two
// volumes; one teardown is refused (a NAS inside), the other succeeds
// afterwards. WaitForUnmount must still say why the pod is stuck.
func TestWaitForUnmountKeepsRefusalAfterOtherVolumeSucceeds(t *testing.T) {
	mounttest.RequireMounts(t)
	synctest.Test(t, func(t *testing.T) {
		e := startManager(t, t.TempDir(), Options{InitialBackoff: time.Hour, MaxBackoff: time.Hour})
		e.m.MarkSourcesReady()
		e.m.AddPod(pod("p", "a", "b"))
		if err := e.m.WaitForMount(waitCtx(t, 10*time.Second), "p"); err != nil {
			t.Fatal(err)
		}
		nas := filepath.Join(e.volDir("p", "a"), "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		gate := make(chan struct{})
		e.plugin.gates.Store("p/b", gate)
		e.m.RemovePod("p")
		synctest.Wait() // a's teardown is refused; b's waits at the gate
		if err := e.m.LastError("p"); !errors.Is(err, mountdetect.ErrCrossesMount) {
			t.Fatalf("LastError = %v; want a's refusal", err)
		}
		close(gate) // b's teardown now succeeds, after a's refusal
		synctest.Wait()
		if mv := e.m.MountedVolumes("p"); len(mv) != 1 {
			t.Fatalf("MountedVolumes = %+v; want a alone", mv)
		}
		if err := e.m.x.Operations().Wait(waitCtx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		err := e.m.WaitForUnmount(waitCtx(t, 50*time.Millisecond), "p")
		var crossing *mountdetect.CrossesMountError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &crossing) || crossing.Mounts[0].MountPoint != nas {
			t.Fatalf("WaitForUnmount = %v; want a timeout that names the NAS", err)
		}
	})
}

// devicePlugin is emptyDir whose operations are volume-wide (as for a
// device-mountable plugin): pods using a volume of the same name share one
// pending-operations key. SetUp for pod "a" waits for gate.
type devicePlugin struct {
	*emptydir.Plugin
	gate chan struct{}
}

func (p *devicePlugin) DeviceMountable() bool { return true }

func (p *devicePlugin) NewMounter(spec *volume.Spec, pd *volume.Pod) (volume.Mounter, error) {
	m, err := p.Plugin.NewMounter(spec, pd)
	if err != nil || pd.UID != "a" {
		return m, err
	}
	return gatedMounter{m, p.gate}, nil
}

type gatedMounter struct {
	volume.Mounter
	gate chan struct{}
}

func (g gatedMounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	<-g.gate
	return g.Mounter.SetUp(ctx, args)
}

// TestBlockedByAnotherPodsOperationIsWoken: pod b's mount is refused with
// "already exists" because pod a's operation holds the shared volume-wide
// key. When a's finishes, b must be retried at once, not at the next resync.
func TestBlockedByAnotherPodsOperationIsWoken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, p := newDeviceManager(t)
		goRun(t, m)
		m.AddPod(pod("a", "shared"))
		synctest.Wait()
		if !m.x.Operations().IsPending(executor.Key(p, uniqueName(p, "a", "shared"), "a")) {
			t.Fatal("pod a's SetUp is not pending")
		}
		m.AddPod(pod("b", "shared"))
		synctest.Wait() // b's pass met a's pending operation
		close(p.gate)
		if err := m.WaitForMount(waitCtx(t, 10*time.Second), "a"); err != nil {
			t.Fatal(err)
		}
		if err := m.WaitForMount(waitCtx(t, 3*time.Second), "b"); err != nil {
			t.Fatalf("pod b not mounted after pod a's operation finished: %v", err)
		}
	})
}

// TestOptionsLoggerIsUsed: with no logger in Run's context, Options.Logger
// (not klog's global logger) receives the Manager's messages.
func TestOptionsLoggerIsUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "pods/p/volumes/example.com~unknown/v"), 0o755)
		var buf strings.Builder
		var mu sync.Mutex
		logger := funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			buf.WriteString(args + "\n")
		}, funcr.Options{})
		l, _ := volume.NewLayout(root)
		m, err := New(Options{Root: root, Plugins: []volume.Plugin{emptydir.New(volume.NewHost(l, nil, 0))}, Logger: &logger})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background()) // no logger in it
		done := make(chan struct{})
		go func() { defer close(done); m.Run(ctx) }()
		<-m.Reconstructed()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(buf.String(), "example.com~unknown") {
			t.Errorf("Options.Logger got %q; want the reconstruction problem", buf.String())
		}
	})
}

// TestRunWaitsForRunningOperations: after ctx is done, Run
// returns only once the operations it started have returned, so that a
// second Manager on the same root never overlaps them; a second Run is
// an error, not a panic.
func TestRunWaitsForRunningOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, p := newDeviceManager(t)
		cancel, done := goRun(t, m)
		m.AddPod(pod("a", "shared"))
		key := executor.Key(p, uniqueName(p, "a", "shared"), "a")
		synctest.Wait()
		if !m.x.Operations().IsPending(key) {
			t.Fatal("pod a's SetUp did not start")
		}
		cancel()
		synctest.Wait() // everything that can run has run
		select {
		case err := <-done:
			t.Fatalf("Run returned (%v) while pod a's SetUp was still running", err)
		default:
		}
		close(p.gate)
		if err := <-done; err != nil { // a deadlock fails the bubble
			t.Errorf("Run = %v; want nil", err)
		}
		if m.x.Operations().IsPending(key) {
			t.Error("an operation is still pending after Run returned")
		}
		if err := m.Run(context.Background()); !errors.Is(err, ErrRunTwice) {
			t.Errorf("second Run = %v; want ErrRunTwice", err)
		}
	})
}

// TestNewWithoutPlugins: Plugins is required.
func TestNewWithoutPlugins(t *testing.T) {
	if _, err := New(Options{Root: t.TempDir()}); !errors.Is(err, ErrNoPlugins) {
		t.Errorf("New(Options{}) = %v; want ErrNoPlugins", err)
	}
}

// rootlessPlugin hides emptydir.Plugin's Layout: a plugin that does not
// tell its root.
type rootlessPlugin struct{ volume.Plugin }

// TestRootGivenOnce: the kubelet root comes from one place. A
// forgotten Options.Root is the plugins' root, not /var/lib/kubelet; a
// Root or a plugin that disagrees is refused, naming both roots.
func TestRootGivenOnce(t *testing.T) {
	plugin := func(root string) volume.Plugin {
		l, err := volume.NewLayout(root)
		if err != nil {
			t.Fatal(err)
		}
		return emptydir.New(volume.NewHost(l, nil, 0))
	}
	a, b := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name     string
		opts     Options
		wantRoot string
		wantErr  error
	}{
		{"root from the plugin", Options{Plugins: []volume.Plugin{plugin(a)}}, a, nil},
		{"same root twice", Options{Root: a, Plugins: []volume.Plugin{plugin(a)}}, a, nil},
		{"Root differs", Options{Root: b, Plugins: []volume.Plugin{plugin(a)}}, "", ErrRootMismatch},
		{"plugins differ", Options{Plugins: []volume.Plugin{plugin(a), &rootlessPlugin{plugin(b)}, plugin(b)}}, "", ErrRootMismatch},
		{"Root not clean", Options{Root: a + "/", Plugins: []volume.Plugin{plugin(a)}}, "", volume.ErrInvalidRoot},
		{"zero Layout", Options{Plugins: []volume.Plugin{emptydir.New(volume.NewHost(volume.Layout{}, nil, 0))}}, "", volume.ErrInvalidRoot},
		{"no plugin tells", Options{Plugins: []volume.Plugin{&rootlessPlugin{plugin(a)}}}, volume.DefaultRoot, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.opts)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("New = %v; want %v", err, tc.wantErr)
			}
			if err != nil {
				if tc.wantErr == ErrRootMismatch && (!strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b)) {
					t.Errorf("error %q does not name both roots", err)
				}
				return
			}
			if got := m.Layout().Root(); got != tc.wantRoot {
				t.Errorf("root = %q; want %q", got, tc.wantRoot)
			}
		})
	}
}

// TestMetricsTwoManagers: a second Manager on the same
// registerer shares the first one's metrics (client_golang's
// AlreadyRegisteredError convention) instead of failing; wrapped
// registerers keep them apart; a foreign metric of the same name is
// still an error.
func TestMetricsTwoManagers(t *testing.T) {
	l, err := volume.NewLayout(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plugins := []volume.Plugin{emptydir.New(volume.NewHost(l, nil, 0))}
	reg := prometheus.NewRegistry()
	m1, err := New(Options{Plugins: plugins, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := New(Options{Plugins: plugins, Registerer: reg})
	if err != nil {
		t.Fatalf("second Manager on one registerer: %v", err)
	}
	if m1.metrics.volumes != m2.metrics.volumes || m1.metrics.opDuration != m2.metrics.opDuration || m1.metrics.refused != m2.metrics.refused {
		t.Error("the second Manager does not share the registered metrics")
	}
	m1.metrics.gauge(emptydir.PluginName, StateMounted, 1)
	m2.metrics.gauge(emptydir.PluginName, StateMounted, 1)
	if n := testutil.ToFloat64(m1.metrics.volumes.WithLabelValues(emptydir.PluginName, "mounted")); n != 2 {
		t.Errorf("shared gauge = %v; want 2", n)
	}

	wrapped := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		m, err := New(Options{Plugins: plugins, Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"manager": name}, wrapped)})
		if err != nil {
			t.Fatalf("wrapped registerer %s: %v", name, err)
		}
		m.metrics.gauge(emptydir.PluginName, StateMounted, 1)
	}
	if n, err := testutil.GatherAndCount(wrapped, "nodevol_volumes"); err != nil || n != 2 {
		t.Errorf("wrapped Managers export %d nodevol_volumes series (%v); want one each", n, err)
	}

	foreign := prometheus.NewRegistry()
	foreign.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodevol_volumes", Help: "not ours"}))
	if _, err := New(Options{Plugins: plugins, Registerer: foreign}); err == nil {
		t.Error("New registered over a foreign nodevol_volumes metric")
	}
}

// failingMounter is a volume.SystemMounter whose mounts fail.
type failingMounter struct{}

func (failingMounter) Mount(source, target, fstype string, options []string) error {
	return errors.New("injected mount failure")
}
func (failingMounter) Unmount(string) error { return nil }

// TestFailedSetUpIsTornDown: a SetUp that fails after it changed the disk
// (here a Memory volume whose mount fails once its directory and metadata
// exist) leaves the volume uncertain, not forgotten: when the pod goes, its
// volume is torn down and its pod directory removed, without a restart.
func TestFailedSetUpIsTornDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		l, _ := volume.NewLayout(root)
		m, err := New(Options{Plugins: []volume.Plugin{emptydir.New(volume.NewHost(l, failingMounter{}, 1<<30))}})
		if err != nil {
			t.Fatal(err)
		}
		goRun(t, m)
		m.MarkSourcesReady()
		p := pod("p")
		p.Volumes = []volume.Spec{{Name: "mem", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumMemory}}}
		if err := m.AddPod(p); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		dir, _ := l.VolumeDir("p", emptydir.PluginName, "mem")
		if !exists(dir) {
			t.Fatal("SetUp did not get as far as the volume directory")
		}
		if mv := m.MountedVolumes("p"); len(mv) != 1 || mv[0].State != StateUncertain || !strings.Contains(fmt.Sprint(mv[0].LastError), "injected mount failure") {
			t.Fatalf("MountedVolumes = %+v; want mem uncertain after the failed mount", mv)
		}
		m.RemovePod("p")
		if err := m.WaitForPodRemoval(waitCtx(t, time.Minute), "p"); err != nil {
			t.Fatalf("WaitForPodRemoval after a failed SetUp = %v", err)
		}
	})
}
