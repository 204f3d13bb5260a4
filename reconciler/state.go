package reconciler

import (
	"fmt"
	"sync"

	"github.com/nodevol/nodevol/internal/executor"
	"github.com/nodevol/nodevol/volume"
)

// MountState is the state of a volume in the actual state of world.
type MountState int

const (
	// StateMounted: SetUp succeeded (or was verified after a restart).
	StateMounted MountState = iota + 1
	// StateUncertain: the volume may or may not be set up — a failed
	// TearDown or SetUp, or a volume found on disk after a restart. It is
	// treated as mounted: torn down when unwanted, verified when wanted.
	StateUncertain
)

func (s MountState) String() string {
	switch s {
	case StateMounted:
		return "mounted"
	case StateUncertain:
		return "uncertain"
	}
	return fmt.Sprintf("MountState(%d)", int(s))
}

// MarshalText prints the state's name.
func (s MountState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

type desiredVolume struct {
	name   volume.UniqueVolumeName
	spec   *volume.Spec
	plugin volume.Plugin
}

type desiredPod struct {
	pod     *volume.Pod
	volumes map[string]*desiredVolume // by the volume's name in the pod
}

// desiredState is the desired state of world: the pods the node should run
// and the volumes they want, indexed by pod and by volume.
type desiredState struct {
	mu       sync.RWMutex
	pods     map[string]*desiredPod
	byVolume map[volume.UniqueVolumeName]map[string]struct{}
}

func newDesiredState() *desiredState {
	return &desiredState{pods: map[string]*desiredPod{}, byVolume: map[volume.UniqueVolumeName]map[string]struct{}{}}
}

func (d *desiredState) setPod(p *desiredPod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleteLocked(p.pod.UID)
	d.pods[p.pod.UID] = p
	for _, v := range p.volumes {
		set := d.byVolume[v.name]
		if set == nil {
			set = map[string]struct{}{}
			d.byVolume[v.name] = set
		}
		set[p.pod.UID] = struct{}{}
	}
}

func (d *desiredState) deletePod(uid string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deleteLocked(uid)
}

func (d *desiredState) deleteLocked(uid string) bool {
	old := d.pods[uid]
	if old == nil {
		return false
	}
	for _, v := range old.volumes {
		if set := d.byVolume[v.name]; set != nil {
			delete(set, uid)
			if len(set) == 0 {
				delete(d.byVolume, v.name)
			}
		}
	}
	delete(d.pods, uid)
	return true
}

// wants reports whether pod uid wants its volume inner.
func (d *desiredState) wants(uid, inner string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	p := d.pods[uid]
	return p != nil && p.volumes[inner] != nil
}

func (d *desiredState) hasPod(uid string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.pods[uid] != nil
}

type actualVolume struct {
	mv      executor.MountedVolume
	state   MountState
	lastErr error
}

// actualState is the actual state of world: which volumes are set up for
// which pods, indexed by pod and by volume. It receives the executor's
// reports (executor.StateUpdater) and tells the reconciler what changed.
type actualState struct {
	mu       sync.RWMutex
	pods     map[string]map[string]*actualVolume
	byVolume map[volume.UniqueVolumeName]map[string]struct{}
	changed  chan struct{} // closed and replaced on every change
	onChange func(uid string)
	gauge    func(plugin string, s MountState, delta float64)
}

func newActualState(onChange func(string), gauge func(string, MountState, float64)) *actualState {
	return &actualState{
		pods:     map[string]map[string]*actualVolume{},
		byVolume: map[volume.UniqueVolumeName]map[string]struct{}{},
		changed:  make(chan struct{}),
		onChange: onChange,
		gauge:    gauge,
	}
}

var _ executor.StateUpdater = (*actualState)(nil)

func (a *actualState) set(v executor.MountedVolume, s MountState, cause error) {
	a.mu.Lock()
	vols := a.pods[v.PodUID]
	if vols == nil {
		vols = map[string]*actualVolume{}
		a.pods[v.PodUID] = vols
	}
	old := vols[v.InnerName]
	if old != nil {
		a.gauge(old.mv.Plugin.Name(), old.state, -1)
		if v.Spec == nil {
			v.Spec = old.mv.Spec
		}
	}
	vols[v.InnerName] = &actualVolume{mv: v, state: s, lastErr: cause}
	a.gauge(v.Plugin.Name(), s, +1)
	set := a.byVolume[v.VolumeName]
	if set == nil {
		set = map[string]struct{}{}
		a.byVolume[v.VolumeName] = set
	}
	set[v.PodUID] = struct{}{}
	a.notifyLocked()
	a.mu.Unlock()
	a.onChange(v.PodUID)
}

// MarkMounted implements executor.StateUpdater.
func (a *actualState) MarkMounted(v executor.MountedVolume) error {
	a.set(v, StateMounted, nil)
	return nil
}

// MarkUncertain implements executor.StateUpdater.
func (a *actualState) MarkUncertain(v executor.MountedVolume, cause error) error {
	a.set(v, StateUncertain, cause)
	return nil
}

// MarkUnmounted implements executor.StateUpdater.
func (a *actualState) MarkUnmounted(v executor.MountedVolume) error {
	a.mu.Lock()
	if vols := a.pods[v.PodUID]; vols != nil {
		if old := vols[v.InnerName]; old != nil {
			a.gauge(old.mv.Plugin.Name(), old.state, -1)
			delete(vols, v.InnerName)
			if len(vols) == 0 {
				delete(a.pods, v.PodUID)
			}
			if set := a.byVolume[old.mv.VolumeName]; set != nil {
				delete(set, v.PodUID)
				if len(set) == 0 {
					delete(a.byVolume, old.mv.VolumeName)
				}
			}
		}
	}
	a.notifyLocked()
	a.mu.Unlock()
	a.onChange(v.PodUID)
	return nil
}

func (a *actualState) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// notify wakes the watchers for a change outside the actual state that
// they wait for too (a pod directory removed).
func (a *actualState) notify() {
	a.mu.Lock()
	a.notifyLocked()
	a.mu.Unlock()
}

// watch returns a channel closed at the next change.
func (a *actualState) watch() <-chan struct{} {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.changed
}

func (a *actualState) get(uid, inner string) (actualVolume, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if v := a.pods[uid][inner]; v != nil {
		return *v, true
	}
	return actualVolume{}, false
}

func (a *actualState) podVolumeCount(uid string) int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.pods[uid])
}
