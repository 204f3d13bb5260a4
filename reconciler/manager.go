package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/internal/executor"
	"github.com/nodevol/nodevol/reconciler/pendingops"
	"github.com/nodevol/nodevol/subpath"
	"github.com/nodevol/nodevol/volume"
)

// Options configure a Manager. Only Plugins is required.
type Options struct {
	// Root is the kubelet root directory. It may be left empty: then it is
	// the root of the plugins that know theirs (volume.LayoutProvider, as
	// emptydir.Plugin does through its Host), and volume.DefaultRoot only
	// when no plugin does. New refuses (ErrRootMismatch) a Root that differs
	// from a plugin's, or plugins that differ from each other.
	Root string
	// Plugins serve the volumes pods ask for (required).
	Plugins []volume.Plugin
	// Logger is used when the context passed to Run carries none.
	Logger *klog.Logger
	// Registerer receives the Manager's metrics; nil registers none. A
	// second Manager on the same Registerer (prometheus.DefaultRegisterer)
	// shares the first one's metrics; wrap it with
	// prometheus.WrapRegistererWith to keep them apart.
	Registerer prometheus.Registerer
	// Clock drives backoff, resync and timeouts (real time when nil).
	Clock clock.WithTicker
	// ResyncPeriod is the safety-net full pass (default 10s): every change
	// already wakes the loop at once.
	ResyncPeriod time.Duration
	// InitialBackoff and MaxBackoff tune operation retries (500ms, 2m2s).
	InitialBackoff, MaxBackoff time.Duration
}

// MountedVolume describes a volume in the actual state of world.
type MountedVolume struct {
	Name      volume.UniqueVolumeName `json:"name"`
	InnerName string                  `json:"innerName"`
	Plugin    string                  `json:"plugin"`
	State     MountState              `json:"state"`
	// LastError is the failure that made the volume uncertain, if any.
	LastError error `json:"-"`
}

// ErrPodNotFound is returned by WaitForMount for a pod that was not added.
var ErrPodNotFound = errors.New("pod not in the desired state of world")

// errReconstructed is the cause recorded for volumes found on disk.
var errReconstructed = errors.New("found on disk at start-up; state unknown until verified")

// Manager is the volume manager a custom kubelet embeds: it keeps the
// desired state (AddPod, RemovePod), reconciles the actual state towards it
// through the operation executor, reconstructs what is on disk at start-up,
// and tears unwanted volumes down only after MarkSourcesReady.
type Manager struct {
	opts     Options
	layout   volume.Layout
	registry *volume.Registry
	x        *executor.Executor
	ran      atomic.Bool // Run was called
	// pollOnly disables event wake-ups (the benchmark's polling
	// baseline sets it before Run).
	pollOnly bool
	dsw      *desiredState
	asw      *actualState
	metrics  *metrics
	clock    clock.WithTicker
	logger   klog.Logger

	sourcesReady  atomic.Bool
	wake          chan struct{}
	reconstructed chan struct{}

	mu        sync.Mutex
	dirty     map[string]struct{}
	spare     map[string]struct{}
	forceFull bool
	retry     map[string]time.Time
	// deferred are pods a pass found gone (not in the desired state) while
	// sources were not ready: they are in neither state of world once their
	// volumes are gone, so a full pass would never visit them again;
	// MarkSourcesReady marks them dirty.
	deferred map[string]struct{}
	// blocked are pods whose operation was refused because one that may
	// belong to another pod was pending; the next completion wakes them.
	blocked  map[string]struct{}
	lastErr  map[string]error
	problems []volume.ScanProblem

	actions []executor.MountedVolume // reused by the loop: a steady pass allocates nothing
	mounts  []executor.VolumeToMount
}

// ErrNoPlugins is returned by New for Options without Plugins.
var ErrNoPlugins = errors.New("reconciler: Options.Plugins is empty: a Manager without plugins can mount nothing")

// ErrRunTwice is returned by a second Run of one Manager.
var ErrRunTwice = errors.New("reconciler: Run was already called on this Manager (a Manager runs once; make a new one)")

// ErrRootMismatch is matched by New's error when the kubelet root is given
// twice (Options.Root and a plugin's Host layout, or two plugins) and the
// two differ: the Manager would look for volumes in one root while its
// plugins set them up in another.
var ErrRootMismatch = errors.New("reconciler: the kubelet root is given twice and differs")

// New builds a Manager; Run starts it.
func New(opts Options) (*Manager, error) {
	if len(opts.Plugins) == 0 {
		return nil, ErrNoPlugins
	}
	root, err := resolveRoot(opts.Root, opts.Plugins)
	if err != nil {
		return nil, err
	}
	opts.Root = root
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	layout, err := volume.NewLayout(opts.Root)
	if err != nil {
		return nil, err
	}
	registry, err := volume.NewRegistry(opts.Plugins...)
	if err != nil {
		return nil, err
	}
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	m := &Manager{
		opts: opts, layout: layout, registry: registry, metrics: met, clock: opts.Clock,
		logger:        klog.Background(),
		dsw:           newDesiredState(),
		reconstructed: make(chan struct{}),
		wake:          make(chan struct{}, 1),
		dirty:         map[string]struct{}{}, spare: map[string]struct{}{},
		retry: map[string]time.Time{}, lastErr: map[string]error{}, deferred: map[string]struct{}{},
		blocked: map[string]struct{}{},
	}
	if opts.Logger != nil {
		m.logger = *opts.Logger
	}
	m.asw = newActualState(m.markDirty, met.gauge)
	ops := pendingops.New(pendingops.Options{Clock: opts.Clock, InitialBackoff: opts.InitialBackoff, MaxBackoff: opts.MaxBackoff})
	m.x = executor.New(executor.Options{
		Clock:      opts.Clock,
		Operations: ops,
		Subpaths:   subpath.New(layout),
		Hooks:      executor.Hooks{Finish: met.finish},
	})
	return m, nil
}

// resolveRoot returns the one kubelet root that root (Options.Root) and
// the plugins that know theirs agree on.
func resolveRoot(root string, plugins []volume.Plugin) (string, error) {
	from := "Options.Root"
	if root != "" {
		if _, err := volume.NewLayout(root); err != nil {
			return "", fmt.Errorf("Options.Root: %w", err)
		}
	}
	for _, p := range plugins {
		lp, ok := p.(volume.LayoutProvider)
		if !ok {
			continue
		}
		r := lp.Layout().Root()
		if r == "" {
			return "", fmt.Errorf("plugin %s: %w: its Host has the zero Layout (build it with volume.NewLayout)", p.Name(), volume.ErrInvalidRoot)
		}
		switch {
		case root == "":
			root, from = r, "plugin "+p.Name()
		case r != root:
			return "", fmt.Errorf("%w: %s says %q, plugin %s's Host says %q (leave Options.Root empty to take the plugins')", ErrRootMismatch, from, root, p.Name(), r)
		}
	}
	if root == "" {
		root = volume.DefaultRoot
	}
	return root, nil
}

// Layout is the kubelet root's layout.
func (m *Manager) Layout() volume.Layout { return m.layout }

// AddPod adds (or replaces) a pod and the volumes it wants.
func (m *Manager) AddPod(pod *volume.Pod) error {
	if err := pod.Validate(); err != nil {
		return err
	}
	dp := &desiredPod{pod: pod, volumes: make(map[string]*desiredVolume, len(pod.Volumes))}
	for i := range pod.Volumes {
		spec := &pod.Volumes[i]
		plugin, err := m.registry.FindBySpec(spec)
		if err != nil {
			return fmt.Errorf("pod %s: %w", pod.UID, err)
		}
		dp.volumes[spec.Name] = &desiredVolume{name: uniqueName(plugin, pod.UID, spec.Name), spec: spec, plugin: plugin}
	}
	m.dsw.setPod(dp)
	m.markDirty(pod.UID)
	return nil
}

// RemovePod removes a pod: its volumes will be torn down (once sources are
// ready) and its directory removed.
func (m *Manager) RemovePod(uid string) {
	m.dsw.deletePod(uid)
	m.markDirty(uid)
}

// MarkSourcesReady says every pod source has delivered its pods: from now
// on volumes no pod wants are torn down. Until then nothing is, so a
// restart never tears down the volumes of pods not yet re-added.
func (m *Manager) MarkSourcesReady() {
	m.mu.Lock()
	// Stored under mu so that deferPod cannot miss it (see there).
	m.sourcesReady.Store(true)
	m.forceFull = true
	for uid := range m.deferred {
		m.dirty[uid] = struct{}{}
	}
	clear(m.deferred)
	m.mu.Unlock()
	m.poke()
}

// deferPod remembers a pod that is gone while sources are not ready, so that
// MarkSourcesReady revisits it (its directory, e.g. a leftover found by
// reconstruction, is cleaned then). Checked again under mu: if sources
// became ready meanwhile, the pod is marked dirty instead of being lost.
func (m *Manager) deferPod(uid string) {
	m.mu.Lock()
	ready := m.sourcesReady.Load()
	if ready {
		m.dirty[uid] = struct{}{}
	} else {
		m.deferred[uid] = struct{}{}
	}
	m.mu.Unlock()
	if ready {
		m.poke()
	}
}

func uniqueName(p volume.Plugin, uid, inner string) volume.UniqueVolumeName {
	if volume.IsDeviceMountable(p) {
		return volume.UniqueVolumeName(p.Name() + "/" + inner)
	}
	return volume.PodVolumeName(p.Name(), uid, inner)
}

func (m *Manager) markDirty(uid string) {
	m.mu.Lock()
	m.dirty[uid] = struct{}{}
	m.mu.Unlock()
	if !m.pollOnly {
		m.poke()
	}
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run reconstructs the actual state from disk, then reconciles until ctx
// is done. The context's logger (klog.FromContext) is used when set.
//
// First it makes the kubelet root if it is missing (mode 0750, as the
// kubelet does) and takes the root's volume-manager lock
// (volume.LockRoot with volume.LockVolumeManager), which it holds until it
// returns, or the process ends: a second Manager on the same root — in
// this process or another — would tear down every volume of the first's
// pods, so its Run returns at once a *volume.RootLockedError (matching
// volume.ErrRootLocked) that names the holder, having touched nothing.
//
// Once ctx is done Run starts no new operation and waits for the running
// ones (each SetUp or TearDown sees ctx done, and returns when it does),
// like http.Server.Shutdown: when Run returns, nothing of this Manager
// touches the kubelet root any more, and the lock is released, so another
// Manager may start on it. It returns nil then, and ErrRunTwice (at once)
// when it is called a second time.
func (m *Manager) Run(ctx context.Context) error {
	if !m.ran.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	// A new node's root may not exist yet: the kubelet makes it, 0750.
	if err := os.MkdirAll(m.layout.Root(), 0o750); err != nil {
		return fmt.Errorf("reconciler: %w", err)
	}
	lock, err := volume.LockRoot(m.layout, volume.LockVolumeManager, volume.LockOptions{Clock: m.clock})
	if err != nil {
		return fmt.Errorf("reconciler: %w", err)
	}
	defer lock.Release()
	// klog.FromContext falls back to klog's global logger, which would
	// override Options.Logger: only a logger really in ctx does.
	if l, err := logr.FromContext(ctx); err == nil {
		m.logger = l
	}
	ctx = klog.NewContext(ctx, m.logger)
	m.reconstruct()
	close(m.reconstructed)
	resync := m.clock.NewTicker(m.opts.ResyncPeriod)
	defer resync.Stop()
	full := true
	for {
		m.pass(ctx, full)
		full = false
		var retryC <-chan time.Time
		var retryTimer clock.Timer
		if next, ok := m.nextRetry(); ok {
			retryTimer = m.clock.NewTimer(max(next.Sub(m.clock.Now()), 0))
			retryC = retryTimer.C()
		}
		select {
		case <-ctx.Done():
			if retryTimer != nil {
				retryTimer.Stop()
			}
			// The operations' own ctx is done too: wait until they return.
			return m.x.Operations().Wait(context.Background())
		case <-m.wake:
		case <-retryC:
		case <-resync.C():
			full = true
		}
		if retryTimer != nil {
			retryTimer.Stop()
		}
	}
}

func (m *Manager) nextRetry() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for _, t := range m.retry {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next, !next.IsZero()
}

// pass reconciles the pods that changed (all of them when full): first
// the unmounts of volumes no pod wants, then the mounts pods want and
// lack, as the kubelet does. With nothing to do it allocates nothing.
func (m *Manager) pass(ctx context.Context, full bool) {
	m.mu.Lock()
	work := m.dirty
	m.dirty, m.spare = m.spare, nil
	if m.forceFull {
		full, m.forceFull = true, false
	}
	if len(m.retry) > 0 {
		now := m.clock.Now()
		for uid, at := range m.retry {
			if !at.After(now) {
				work[uid] = struct{}{}
				delete(m.retry, uid)
			}
		}
	}
	m.mu.Unlock()
	if full {
		m.dsw.mu.RLock()
		for uid := range m.dsw.pods {
			work[uid] = struct{}{}
		}
		m.dsw.mu.RUnlock()
		m.asw.mu.RLock()
		for uid := range m.asw.pods {
			work[uid] = struct{}{}
		}
		m.asw.mu.RUnlock()
	}
	for uid := range work {
		m.reconcileUnmount(ctx, uid)
	}
	for uid := range work {
		m.reconcileMount(ctx, uid)
	}
	clear(work)
	m.mu.Lock()
	m.spare = work
	m.mu.Unlock()
}

func (m *Manager) reconcileUnmount(ctx context.Context, uid string) {
	// Locks are taken desired-then-actual everywhere (or one at a time, as
	// here): nesting them in both orders could deadlock against waiting
	// writers.
	m.actions = m.actions[:0]
	m.asw.mu.RLock()
	for _, av := range m.asw.pods[uid] {
		m.actions = append(m.actions, av.mv)
	}
	m.asw.mu.RUnlock()
	unwanted := m.actions[:0]
	for _, mv := range m.actions {
		if !m.dsw.wants(uid, mv.InnerName) {
			unwanted = append(unwanted, mv)
		}
	}
	m.actions = unwanted
	if !m.sourcesReady.Load() {
		if !m.dsw.hasPod(uid) {
			m.deferPod(uid)
		}
		return
	}
	for _, mv := range m.actions {
		m.handle(uid, mv.Plugin, mv.VolumeName, m.x.UnmountVolume(ctx, mv, m.asw, m.done(uid, mv.Plugin, mv.VolumeName)))
	}
	if len(m.actions) == 0 && !m.dsw.hasPod(uid) && m.asw.podVolumeCount(uid) == 0 {
		m.cleanupPodDir(ctx, uid)
	}
}

func (m *Manager) reconcileMount(ctx context.Context, uid string) {
	m.mounts = m.mounts[:0]
	m.dsw.mu.RLock()
	dp := m.dsw.pods[uid]
	if dp != nil {
		for inner, dv := range dp.volumes {
			av, ok := m.asw.get(uid, inner)
			if !ok || av.state != StateMounted {
				m.mounts = append(m.mounts, executor.VolumeToMount{VolumeName: dv.name, Pod: dp.pod, Spec: dv.spec, Plugin: dv.plugin})
			}
		}
	}
	m.dsw.mu.RUnlock()
	for _, v := range m.mounts {
		m.handle(uid, v.Plugin, v.VolumeName, m.x.MountVolume(ctx, v, m.asw, m.done(uid, v.Plugin, v.VolumeName)))
	}
}

// handle deals with the executor's answer to a Run: started, already
// running (its completion will mark the pod dirty) or backing off (retry
// when the backoff expires).
func (m *Manager) handle(uid string, p volume.Plugin, name volume.UniqueVolumeName, err error) {
	var be *pendingops.BackoffError
	var ae *pendingops.AlreadyExistsError
	switch {
	case err == nil:
	case errors.As(err, &ae):
		// The pending operation's completion marks only its own pod
		// dirty. When it may belong to another pod (a volume-wide key, or
		// a wildcard match), remember this one: every completion wakes
		// the blocked pods, instead of leaving them to the next resync.
		if ae.Key.Pod == "" || ae.Pending != ae.Key {
			m.mu.Lock()
			m.blocked[uid] = struct{}{}
			m.mu.Unlock()
			// It may have finished (and drained blocked) between Run and
			// now: done drains only after the operation stopped pending.
			if !m.x.Operations().IsPending(ae.Key) {
				m.markDirty(uid)
			}
		}
	case errors.As(err, &be):
		m.retryAt(uid, be.RetryAfter())
	default:
		m.logger.Error(err, "Cannot start volume operation", "pod", uid, "volume", name)
		m.mu.Lock()
		m.lastErr[uid] = err
		m.mu.Unlock()
	}
}

func (m *Manager) retryAt(uid string, at time.Time) {
	m.mu.Lock()
	if old, ok := m.retry[uid]; !ok || at.Before(old) {
		m.retry[uid] = at.Add(time.Millisecond) // strictly after the backoff
	}
	m.mu.Unlock()
	m.poke() // re-arm the loop's retry timer
}

func (m *Manager) done(uid string, p volume.Plugin, name volume.UniqueVolumeName) func(error) {
	return func(err error) {
		m.mu.Lock()
		if err != nil {
			m.lastErr[uid] = err
		} else {
			delete(m.lastErr, uid)
		}
		m.mu.Unlock()
		if err != nil {
			if at, _ := m.x.Operations().LastError(executor.Key(p, name, uid)); !at.IsZero() {
				m.retryAt(uid, at)
			}
		}
		m.mu.Lock()
		for b := range m.blocked {
			m.dirty[b] = struct{}{}
		}
		clear(m.blocked)
		m.mu.Unlock()
		m.markDirty(uid)
	}
}

// cleanupPodDir removes the directory of a pod that is gone and has no
// volume left (removePodDir), retrying after ResyncPeriod when it cannot.
func (m *Manager) cleanupPodDir(ctx context.Context, uid string) {
	if err := removePodDir(m.layout, uid); err != nil {
		m.logger.Error(err, "Pod directory not fully removed; will retry", "pod", uid)
		m.mu.Lock()
		m.lastErr[uid] = err
		m.mu.Unlock()
		m.retryAt(uid, m.clock.Now().Add(m.opts.ResyncPeriod))
		return
	}
	m.mu.Lock()
	delete(m.lastErr, uid)
	m.mu.Unlock()
	m.asw.notify() // WaitForPodRemoval
	klog.FromContext(ctx).V(2).Info("Removed pod directory", "pod", uid)
}

// WaitForMount waits until every volume of pod uid is mounted, or ctx is
// done (then the error carries the last operation failure, if any).
func (m *Manager) WaitForMount(ctx context.Context, uid string) error {
	for {
		changed := m.asw.watch()
		m.dsw.mu.RLock()
		dp := m.dsw.pods[uid]
		all := dp != nil
		if dp != nil {
			for inner := range dp.volumes {
				if av, ok := m.asw.get(uid, inner); !ok || av.state != StateMounted {
					all = false
					break
				}
			}
		}
		m.dsw.mu.RUnlock()
		if dp == nil {
			return fmt.Errorf("%w: %s", ErrPodNotFound, uid)
		}
		if all {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return m.waitErr(ctx, uid, "mount")
		}
	}
}

// WaitForUnmount waits until pod uid has no volume left in the actual
// state, or ctx is done. Then, when a teardown was refused, the error says
// why: errors.Is(err, mountdetect.ErrCrossesMount) holds and errors.As
// gives the *mountdetect.CrossesMountError with the nested mounts.
func (m *Manager) WaitForUnmount(ctx context.Context, uid string) error {
	for {
		changed := m.asw.watch()
		if m.asw.podVolumeCount(uid) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return m.waitErr(ctx, uid, "unmount")
		}
	}
}

// WaitForPodRemoval waits until pod uid is removed (RemovePod), none of
// its volumes is left in the actual state and its pod directory is gone
// from disk — the moment an embedder may forget the pod — or until ctx is
// done. Then the error says what is still missing: the pod is still
// wanted, sources are not ready (nothing is torn down before
// MarkSourcesReady), or the failure that keeps a volume or the directory
// in place (a refused teardown matches mountdetect.ErrCrossesMount).
func (m *Manager) WaitForPodRemoval(ctx context.Context, uid string) error {
	podDir, err := m.layout.PodDir(uid)
	if err != nil {
		return err
	}
	for {
		changed := m.asw.watch()
		wanted := m.dsw.hasPod(uid)
		if !wanted && m.asw.podVolumeCount(uid) == 0 {
			_, err := os.Lstat(podDir)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			switch {
			case wanted:
				return fmt.Errorf("waiting for removal of pod %s: %w; the pod is still in the desired state of world (RemovePod was not called)", uid, ctx.Err())
			case !m.sourcesReady.Load():
				return fmt.Errorf("waiting for removal of pod %s: %w; sources are not ready, so nothing is torn down yet (MarkSourcesReady was not called)", uid, ctx.Err())
			}
			return m.waitErr(ctx, uid, "removal")
		}
	}
}

func (m *Manager) waitErr(ctx context.Context, uid, what string) error {
	m.mu.Lock()
	last := m.lastErr[uid]
	m.mu.Unlock()
	if what != "mount" {
		// lastErr is per pod: another volume's later success clears it.
		// The volumes still there keep the failure that made each of them
		// uncertain (a refused teardown names its mounts): prefer those.
		var errs []error
		m.asw.mu.RLock()
		for _, av := range m.asw.pods[uid] {
			if av.lastErr != nil && av.lastErr != errReconstructed {
				errs = append(errs, av.lastErr)
			}
		}
		m.asw.mu.RUnlock()
		if len(errs) > 0 {
			if last != nil && !slices.ContainsFunc(errs, func(e error) bool { return errors.Is(last, e) }) {
				errs = append(errs, last) // e.g. a subpath failure, which leaves the volume mounted
			}
			last = errors.Join(errs...)
		}
	}
	if last != nil {
		return fmt.Errorf("waiting for %s of pod %s: %w; last error: %w", what, uid, ctx.Err(), last)
	}
	return fmt.Errorf("waiting for %s of pod %s: %w", what, uid, ctx.Err())
}

// MountedVolumes lists the volumes of pod uid in the actual state.
func (m *Manager) MountedVolumes(uid string) []MountedVolume {
	m.asw.mu.RLock()
	defer m.asw.mu.RUnlock()
	out := make([]MountedVolume, 0, len(m.asw.pods[uid]))
	for inner, av := range m.asw.pods[uid] {
		out = append(out, MountedVolume{Name: av.mv.VolumeName, InnerName: inner, Plugin: av.mv.Plugin.Name(), State: av.state, LastError: av.lastErr})
	}
	slices.SortFunc(out, func(a, b MountedVolume) int { return strings.Compare(a.InnerName, b.InnerName) })
	return out
}

// Reconstructed is closed once Run has put the volumes found on disk into
// the actual state (MountedVolumes then shows them, as uncertain).
func (m *Manager) Reconstructed() <-chan struct{} { return m.reconstructed }

// Problems lists what reconstruction found on disk and left alone
// (unknown plugins, names that do not parse, specs that could not be
// rebuilt).
func (m *Manager) Problems() []volume.ScanProblem {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]volume.ScanProblem(nil), m.problems...)
}

// LastError returns the last operation error for pod uid, if any.
func (m *Manager) LastError(uid string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastErr[uid]
}
