package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/reconciler/pendingops"
	"github.com/nodevol/nodevol/subpath"
	"github.com/nodevol/nodevol/volume"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

type call struct {
	what string
	v    MountedVolume
	err  error
}

type fakeASW struct {
	mu    sync.Mutex
	calls []call
}

func (a *fakeASW) record(what string, v MountedVolume, err error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, call{what, v, err})
	return nil
}
func (a *fakeASW) MarkMounted(v MountedVolume) error { return a.record("mounted", v, nil) }
func (a *fakeASW) MarkUncertain(v MountedVolume, err error) error {
	return a.record("uncertain", v, err)
}
func (a *fakeASW) MarkUnmounted(v MountedVolume) error { return a.record("unmounted", v, nil) }
func (a *fakeASW) last() call {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.calls) == 0 {
		return call{}
	}
	return a.calls[len(a.calls)-1]
}

type env struct {
	t      *testing.T
	ctx    context.Context
	clock  *testclock.FakeClock
	x      *Executor
	plugin *emptydir.Plugin
	layout volume.Layout
	asw    *fakeASW
	pod    *volume.Pod
	hooks  []string
	mu     sync.Mutex
}

func newEnv(t *testing.T, subpaths SubpathCleaner) *env {
	_, ctx := ktesting.NewTestContext(t)
	c := testclock.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	l, _ := volume.NewLayout(filepath.Join(t.TempDir(), "kubelet"))
	e := &env{t: t, ctx: ctx, clock: c, layout: l, asw: &fakeASW{},
		plugin: emptydir.New(volume.NewHost(l, nil, 0)),
		pod:    &volume.Pod{UID: "uid-1", Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{}}}},
	}
	e.x = New(Options{Clock: c, Operations: pendingops.New(pendingops.Options{Clock: c}), Subpaths: subpaths, Hooks: Hooks{
		Start: func(op pendingops.OpName, plugin string) {
			e.mu.Lock()
			e.hooks = append(e.hooks, "start "+string(op)+" "+plugin)
			e.mu.Unlock()
		},
		Finish: func(op pendingops.OpName, plugin string, err error, d time.Duration) {
			e.mu.Lock()
			e.hooks = append(e.hooks, "finish "+string(op)+" "+plugin)
			e.mu.Unlock()
		},
	}})
	return e
}

func (e *env) volumeToMount(p volume.Plugin) VolumeToMount {
	return VolumeToMount{VolumeName: volume.PodVolumeName(p.Name(), e.pod.UID, "cache"), Pod: e.pod, Spec: &e.pod.Volumes[0], Plugin: p}
}

// wait runs start and returns the operation's final error.
func wait(t *testing.T, start func(done func(error)) error) error {
	t.Helper()
	ch := make(chan error, 1)
	if err := start(func(err error) { ch <- err }); err != nil {
		t.Fatalf("operation did not start: %v", err)
	}
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("operation did not finish")
	}
	return nil
}

func TestMountThenUnmount(t *testing.T) {
	e := newEnv(t, nil)
	v := e.volumeToMount(e.plugin)
	if err := wait(t, func(done func(error)) error { return e.x.MountVolume(e.ctx, v, e.asw, done) }); err != nil {
		t.Fatalf("mount: %v", err)
	}
	if c := e.asw.last(); c.what != "mounted" || c.v.InnerName != "cache" || c.v.PodUID != "uid-1" {
		t.Fatalf("asw = %+v", c)
	}
	dir, _ := e.layout.VolumeDir("uid-1", emptydir.PluginName, "cache")
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, v.mounted(), e.asw, done) }); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	if c := e.asw.last(); c.what != "unmounted" {
		t.Fatalf("asw = %+v", c)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("volume dir still there: %v", err)
	}
	want := []string{"start mount kubernetes.io/empty-dir", "finish mount kubernetes.io/empty-dir", "start unmount kubernetes.io/empty-dir", "finish unmount kubernetes.io/empty-dir"}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.hooks) != 4 || e.hooks[0] != want[0] || e.hooks[3] != want[3] {
		t.Errorf("hooks = %q", e.hooks)
	}
}

// failingPlugin wraps emptydir with a TearDown that fails, panics or hangs.
type failingPlugin struct {
	*emptydir.Plugin
	tearDown func(ctx context.Context) error
	volWide  bool
}

func (p *failingPlugin) NewUnmounter(vol, uid string) (volume.Unmounter, error) {
	return unmounterFunc(p.tearDown), nil
}
func (p *failingPlugin) DeviceMountable() bool { return p.volWide }

type unmounterFunc func(context.Context) error

func (f unmounterFunc) TearDown(ctx context.Context) error { return f(ctx) }
func (f unmounterFunc) Path() string                       { return "/fake" }

func TestTearDownFailureMarksUncertainAndBacksOff(t *testing.T) {
	e := newEnv(t, nil)
	cause := &mountdetect.CrossesMountError{Path: "/v", Mounts: []mountdetect.Mount{{MountPoint: "/v/nas"}}}
	p := &failingPlugin{Plugin: e.plugin, tearDown: func(context.Context) error {
		return &volume.OperationError{Kind: volume.Transient, Op: "TearDown", Path: "/v", Err: cause}
	}}
	mv := e.volumeToMount(p).mounted()
	err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, mv, e.asw, done) })
	if !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("unmount error = %v; want the nested-mount refusal in the chain", err)
	}
	if c := e.asw.last(); c.what != "uncertain" || !errors.Is(c.err, mountdetect.ErrCrossesMount) {
		t.Fatalf("asw = %+v; want uncertain with the cause", c)
	}
	// Backing off: a second unmount is refused until 500ms have passed.
	err = e.x.UnmountVolume(e.ctx, mv, e.asw, nil)
	var be *pendingops.BackoffError
	if !errors.As(err, &be) || !errors.Is(be.LastError, mountdetect.ErrCrossesMount) {
		t.Fatalf("second unmount = %v; want a backoff error carrying the refusal", err)
	}
	e.clock.Step(501 * time.Millisecond)
	if err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, mv, e.asw, done) }); err == nil {
		t.Fatal("retry after backoff succeeded; the fake always fails")
	}
}

func TestPanicInTearDown(t *testing.T) {
	e := newEnv(t, nil)
	p := &failingPlugin{Plugin: e.plugin, tearDown: func(context.Context) error { panic("plugin bug") }}
	err := wait(t, func(done func(error)) error {
		return e.x.UnmountVolume(e.ctx, e.volumeToMount(p).mounted(), e.asw, done)
	})
	var pe *pendingops.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v; want *PanicError", err)
	}
}

func TestHangingTearDownEndsWithContext(t *testing.T) {
	e := newEnv(t, nil)
	p := &failingPlugin{Plugin: e.plugin, tearDown: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	ctx, cancel := context.WithCancel(e.ctx)
	ch := make(chan error, 1)
	if err := e.x.UnmountVolume(ctx, e.volumeToMount(p).mounted(), e.asw, func(err error) { ch <- err }); err != nil {
		t.Fatal(err)
	}
	if !e.x.Operations().IsPending(Key(p, e.volumeToMount(p).VolumeName, "uid-1")) {
		t.Error("hanging operation not pending")
	}
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
}

type failingSubpaths struct{ called int }

func (f *failingSubpaths) Check(ctx context.Context, podUID, plugin, vol string) error { return nil }
func (f *failingSubpaths) Clean(ctx context.Context, podUID, plugin, vol string) error {
	f.called++
	return errors.New("subpath busy")
}

// recordingSubpaths records the order of calls; check is Check's answer.
type recordingSubpaths struct {
	calls []string
	check error
}

func (r *recordingSubpaths) Check(ctx context.Context, podUID, plugin, vol string) error {
	r.calls = append(r.calls, "check "+plugin+" "+vol)
	return r.check
}
func (r *recordingSubpaths) Clean(ctx context.Context, podUID, plugin, vol string) error {
	r.calls = append(r.calls, "clean "+plugin+" "+vol)
	return nil
}

// checkingUnmounter refuses in CheckTearDown.
type checkingUnmounter struct {
	unmounterFunc
	refuse error
}

func (c checkingUnmounter) CheckTearDown(context.Context) error { return c.refuse }

type checkingPlugin struct {
	*emptydir.Plugin
	u checkingUnmounter
}

func (p *checkingPlugin) NewUnmounter(vol, uid string) (volume.Unmounter, error) { return p.u, nil }

// TestRefusalBeforeAnyChange: a subpath check or a
// teardown check that refuses stops the operation before the subpaths are
// cleaned; when both pass, Clean runs before TearDown.
func TestRefusalBeforeAnyChange(t *testing.T) {
	refusal := &mountdetect.CrossesMountError{Path: "/v", Mounts: []mountdetect.Mount{{MountPoint: "/v/nas"}}}
	for _, c := range []struct {
		name          string
		subpathCheck  error
		tearDownCheck error
		want          []string
	}{
		{"subpath check refuses", refusal, nil, []string{"check kubernetes.io/empty-dir cache"}},
		{"teardown check refuses", nil, refusal, []string{"check kubernetes.io/empty-dir cache"}},
		{"both pass", nil, nil, []string{"check kubernetes.io/empty-dir cache", "clean kubernetes.io/empty-dir cache", "teardown"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := &recordingSubpaths{check: c.subpathCheck}
			e := newEnv(t, sp)
			p := &checkingPlugin{Plugin: e.plugin, u: checkingUnmounter{
				unmounterFunc: func(context.Context) error { sp.calls = append(sp.calls, "teardown"); return nil },
				refuse:        c.tearDownCheck,
			}}
			mv := e.volumeToMount(p).mounted()
			err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, mv, e.asw, done) })
			if (c.subpathCheck != nil || c.tearDownCheck != nil) != (err != nil) {
				t.Errorf("err = %v", err)
			}
			if err != nil && !errors.Is(err, mountdetect.ErrCrossesMount) {
				t.Errorf("err = %v; want the refusal in the chain", err)
			}
			if !slices.Equal(sp.calls, c.want) {
				t.Errorf("calls = %q; want %q", sp.calls, c.want)
			}
		})
	}
}

// TestRefusedTearDownLeavesSubpathBinds, with real mounts: an emptyDir
// whose teardown refuses (a NAS mounted beneath it) keeps its active
// subPath bind: the unmount operation fails before the subpaths are
// cleaned.
func TestRefusedTearDownLeavesSubpathBinds(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, nil)
	e.x.subpaths = subpath.New(e.layout)
	vm := e.volumeToMount(e.plugin)
	if err := wait(t, func(done func(error)) error { return e.x.MountVolume(e.ctx, vm, e.asw, done) }); err != nil {
		t.Fatal(err)
	}
	volDir, _ := e.layout.VolumeDir("uid-1", emptydir.PluginName, "cache")
	subDir, _ := e.layout.SubpathDir("uid-1", "cache", "app", 0)
	mounttest.Build(t, volDir, "dir sub", "file pod-data keep")
	mounttest.Bind(t, filepath.Join(volDir, "sub"), subDir)
	nas := filepath.Join(volDir, "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	want := mounttest.Sentinels(t, nas)
	before := mounttest.Snapshot(t, filepath.Dir(filepath.Dir(e.layout.Root())))

	err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, vm.mounted(), e.asw, done) })
	if !errors.Is(err, mountdetect.ErrCrossesMount) {
		t.Fatalf("UnmountVolume = %v; want the nested-mount refusal", err)
	}
	if !mounttest.IsMountRoot(t, subDir) {
		t.Error("the subPath bind was unmounted by a refused teardown")
	}
	mounttest.Intact(t, nas, want)
	mounttest.Intact(t, filepath.Dir(filepath.Dir(e.layout.Root())), before)
}

func TestSubpathFailureStopsTearDown(t *testing.T) {
	sp := &failingSubpaths{}
	e := newEnv(t, sp)
	tornDown := false
	p := &failingPlugin{Plugin: e.plugin, tearDown: func(context.Context) error { tornDown = true; return nil }}
	mv := e.volumeToMount(p).mounted()
	err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, mv, e.asw, done) })
	if err == nil || tornDown || sp.called != 1 {
		t.Fatalf("err = %v, TearDown ran = %v; want the subpath error and no TearDown", err, tornDown)
	}
	if !errors.Is(e.x.UnmountVolume(e.ctx, mv, e.asw, nil), pendingops.ErrBackoff) {
		t.Error("a subpath failure did not put the operation into backoff")
	}
}

func TestKeys(t *testing.T) {
	e := newEnv(t, nil)
	perPod := Key(e.plugin, "kubernetes.io/empty-dir/uid-1-cache", "uid-1")
	if perPod.Pod != "uid-1" {
		t.Errorf("emptyDir key %v is not per pod", perPod)
	}
	wide := Key(&failingPlugin{Plugin: e.plugin, volWide: true}, "csi/vol", "uid-1")
	if wide.Pod != "" {
		t.Errorf("device-mountable key %v is not volume-wide", wide)
	}
	// A volume-wide operation blocks another pod's operation on the volume.
	block := make(chan struct{})
	p := &failingPlugin{Plugin: e.plugin, volWide: true, tearDown: func(context.Context) error { <-block; return nil }}
	mv := MountedVolume{VolumeName: "csi/vol", PodUID: "uid-1", InnerName: "cache", Plugin: p}
	done := make(chan error, 1)
	if err := e.x.UnmountVolume(e.ctx, mv, e.asw, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	mv2 := mv
	mv2.PodUID = "uid-2"
	if err := e.x.UnmountVolume(e.ctx, mv2, e.asw, nil); !errors.Is(err, pendingops.ErrAlreadyExists) {
		t.Errorf("second pod's unmount = %v; want ErrAlreadyExists", err)
	}
	close(block)
	<-done
}

// TestNestedMountRefusalEndToEnd: a real emptyDir with a tmpfs inside;
// the unmount operation fails with the refusal, the volume is uncertain,
// the NAS is intact.
func TestNestedMountRefusalEndToEnd(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, nil)
	v := e.volumeToMount(e.plugin)
	if err := wait(t, func(done func(error)) error { return e.x.MountVolume(e.ctx, v, e.asw, done) }); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.layout.VolumeDir("uid-1", emptydir.PluginName, "cache")
	nas := filepath.Join(dir, "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	snap := mounttest.Sentinels(t, nas)
	err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, v.mounted(), e.asw, done) })
	var crossing *mountdetect.CrossesMountError
	if !errors.As(err, &crossing) || len(crossing.Mounts) != 1 || crossing.Mounts[0].MountPoint != nas {
		t.Fatalf("unmount = %v; want a refusal naming %s", err, nas)
	}
	if e.asw.last().what != "uncertain" {
		t.Errorf("asw = %+v", e.asw.last())
	}
	mounttest.Intact(t, nas, snap)
	mounttest.Unmount(t, nas)
	e.clock.Step(time.Second)
	if err := wait(t, func(done func(error)) error { return e.x.UnmountVolume(e.ctx, v.mounted(), e.asw, done) }); err != nil {
		t.Fatalf("unmount after the NAS is gone: %v", err)
	}
}

// TestTearDownOrder: TearDown, the unmount operation without pending
// operations or state, asks and acts in the operation's order and says
// which subpath step failed.
func TestTearDownOrder(t *testing.T) {
	refusal := &mountdetect.CrossesMountError{Path: "/v", Mounts: []mountdetect.Mount{{MountPoint: "/v/nas"}}}
	for _, c := range []struct {
		name          string
		subpathCheck  error
		tearDownCheck error
		want          []string
		wantOp        string // the *SubpathError's Op, "" when none
	}{
		{"subpath check refuses", refusal, nil, []string{"check kubernetes.io/empty-dir cache"}, "check"},
		{"teardown check refuses", nil, refusal, []string{"check kubernetes.io/empty-dir cache"}, ""},
		{"both pass", nil, nil, []string{"check kubernetes.io/empty-dir cache", "clean kubernetes.io/empty-dir cache", "teardown"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := &recordingSubpaths{check: c.subpathCheck}
			e := newEnv(t, nil)
			p := &checkingPlugin{Plugin: e.plugin, u: checkingUnmounter{
				unmounterFunc: func(context.Context) error { sp.calls = append(sp.calls, "teardown"); return nil },
				refuse:        c.tearDownCheck,
			}}
			err := TearDown(e.ctx, sp, p, "uid-1", "cache")
			if (c.subpathCheck != nil || c.tearDownCheck != nil) != (err != nil) {
				t.Errorf("TearDown = %v", err)
			}
			if err != nil && !errors.Is(err, mountdetect.ErrCrossesMount) {
				t.Errorf("TearDown = %v; want the refusal in the chain", err)
			}
			var se *SubpathError
			gotOp := ""
			if errors.As(err, &se) {
				gotOp = se.Op
			}
			if gotOp != c.wantOp {
				t.Errorf("TearDown = %v: subpath step %q; want %q", err, gotOp, c.wantOp)
			}
			if !slices.Equal(sp.calls, c.want) {
				t.Errorf("calls = %q; want %q", sp.calls, c.want)
			}
			if len(e.asw.calls) != 0 {
				t.Errorf("TearDown reported into the actual state: %v", e.asw.calls)
			}
		})
	}
	t.Run("clean fails", func(t *testing.T) {
		sp := &failingSubpaths{}
		e := newEnv(t, nil)
		tornDown := false
		p := &failingPlugin{Plugin: e.plugin, tearDown: func(context.Context) error { tornDown = true; return nil }}
		err := TearDown(e.ctx, sp, p, "uid-1", "cache")
		var se *SubpathError
		if !errors.As(err, &se) || se.Op != "clean" || tornDown || err.Error() != "clean subpaths: subpath busy" {
			t.Errorf("TearDown = %v, TearDown ran = %v; want \"clean subpaths: subpath busy\" and no TearDown", err, tornDown)
		}
	})
}
