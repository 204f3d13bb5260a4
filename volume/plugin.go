package volume

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Plugin is a volume plugin: it recognises the specs it serves and makes
// the mounters and unmounters that set volumes up and tear them down.
type Plugin interface {
	// Name is the plugin's qualified name, e.g. "kubernetes.io/empty-dir".
	Name() string
	// CanSupport reports whether this plugin serves spec.
	CanSupport(spec *Spec) bool
	// NewMounter returns a Mounter for spec in pod.
	NewMounter(spec *Spec, pod *Pod) (Mounter, error)
	// NewUnmounter returns an Unmounter for the volume named volume of the
	// pod with UID podUID. It needs no spec: after a restart only the disk
	// is left.
	NewUnmounter(volume, podUID string) (Unmounter, error)
}

// LayoutProvider is implemented by plugins built for one kubelet root
// (through their Host): a Manager takes its root from them, and refuses
// plugins that disagree about it.
type LayoutProvider interface {
	Layout() Layout
}

// SpecConstructor is implemented by plugins that can rebuild a spec from a
// volume directory found on disk (reconstruction after a restart).
type SpecConstructor interface {
	ConstructSpec(volume, volumePath string) (*Spec, error)
}

// MounterArgs carries per-call options for SetUp.
type MounterArgs struct {
	// FSGroup, when set, is the group that should own the volume.
	FSGroup *int64
}

// Mounter sets one volume up for one pod.
type Mounter interface {
	// SetUp makes the volume ready at Path. It is idempotent.
	SetUp(ctx context.Context, args MounterArgs) error
	// Path is the volume directory.
	Path() string
}

// Unmounter tears one volume down.
type Unmounter interface {
	// TearDown removes the volume at Path. It is idempotent: nothing there
	// is success.
	TearDown(ctx context.Context) error
	Path() string
}

// TearDownChecker is implemented by an Unmounter that can say, changing
// nothing, whether its TearDown would refuse (the emptyDir plugin's does).
// The volume manager asks it first, before cleaning the volume's subPath
// bind mounts, so that a teardown that would be refused leaves everything
// in place; an Unmounter without it is torn down after its subpaths.
type TearDownChecker interface {
	CheckTearDown(ctx context.Context) error
}

// SystemMounter mounts and unmounts filesystems. k8s.io/mount-utils' Interface
// (and its FakeMounter) satisfies it.
type SystemMounter interface {
	Mount(source, target, fstype string, options []string) error
	Unmount(target string) error
}

// Host is what plugins need from the node.
type Host interface {
	// Layout is the kubelet root's layout.
	Layout() Layout
	// Mounter mounts tmpfs and hugetlbfs volumes.
	Mounter() SystemMounter
	// NodeAllocatableMemory is the node's allocatable memory in bytes (0
	// when unknown), an upper bound for Memory-medium tmpfs sizes.
	NodeAllocatableMemory() (int64, error)
}

// FailureKind classifies an operation failure.
type FailureKind int

const (
	// Final failures will not go away by retrying the same operation.
	Final FailureKind = iota
	// Transient failures may succeed when retried (after backoff).
	Transient
	// Uncertain failures leave the volume in an unknown state: it may or
	// may not be mounted, so it must be treated as possibly mounted.
	Uncertain
)

func (k FailureKind) String() string {
	switch k {
	case Final:
		return "final"
	case Transient:
		return "transient"
	case Uncertain:
		return "uncertain"
	}
	return fmt.Sprintf("FailureKind(%d)", int(k))
}

// OperationError is a classified failure of a volume operation. Use
// errors.As to get it and Kind to decide what to do; Unwrap gives the cause
// (for example a *mountdetect.CrossesMountError).
type OperationError struct {
	Kind FailureKind
	Op   string // "SetUp", "TearDown", ...
	Path string
	Err  error
}

func (e *OperationError) Error() string {
	return fmt.Sprintf("%s %s (%s): %v", e.Op, e.Path, e.Kind, e.Err)
}

func (e *OperationError) Unwrap() error { return e.Err }

// KindOf returns the FailureKind of err: the kind of the first
// OperationError in its chain, Final when there is none.
func KindOf(err error) FailureKind {
	var oe *OperationError
	if errors.As(err, &oe) {
		return oe.Kind
	}
	return Final
}

// Registry errors.
var (
	ErrPluginNotFound  = errors.New("no volume plugin found")
	ErrMultiplePlugins = errors.New("more than one volume plugin matches")
	ErrDuplicatePlugin = errors.New("volume plugin already registered")
)

// Registry holds plugins by name. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	plugins map[string]Plugin
}

// NewRegistry registers plugins and returns the registry.
func NewRegistry(plugins ...Plugin) (*Registry, error) {
	r := &Registry{plugins: map[string]Plugin{}}
	for _, p := range plugins {
		if err := r.Register(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds p; its name must be valid and not registered yet.
func (r *Registry) Register(p Plugin) error {
	if p == nil {
		return errors.New("register volume plugin: nil plugin")
	}
	name := p.Name()
	if err := ValidatePluginName(name); err != nil {
		return fmt.Errorf("register volume plugin: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plugins == nil {
		r.plugins = map[string]Plugin{}
	}
	if _, dup := r.plugins[name]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicatePlugin, name)
	}
	r.plugins[name] = p
	return nil
}

// FindByName returns the plugin called name.
func (r *Registry) FindByName(name string) (Plugin, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if p, ok := r.plugins[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w: name %q", ErrPluginNotFound, name)
}

// FindBySpec returns the one plugin that supports spec; none or several
// are errors (ErrPluginNotFound, ErrMultiplePlugins naming them).
func (r *Registry) FindBySpec(spec *Spec) (Plugin, error) {
	if spec == nil {
		return nil, fmt.Errorf("%w: nil spec", ErrPluginNotFound)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var matches []Plugin
	for _, p := range r.plugins {
		if p.CanSupport(spec) {
			matches = append(matches, p)
		}
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("%w for volume %q", ErrPluginNotFound, spec.Name)
	case 1:
		return matches[0], nil
	}
	names := make([]string, len(matches))
	for i, p := range matches {
		names[i] = p.Name()
	}
	sort.Strings(names)
	return nil, fmt.Errorf("%w volume %q: %s", ErrMultiplePlugins, spec.Name, strings.Join(names, ", "))
}

// Names lists the registered plugin names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.plugins))
	for n := range r.plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewHost returns a Host with a fixed layout, mounter and allocatable
// memory (bytes; 0 when unknown). A nil mounter makes plugins use the
// operating system's mount(2)/umount2(2).
func NewHost(layout Layout, mounter SystemMounter, allocatableMemory int64) Host {
	return staticHost{layout: layout, mounter: mounter, allocatable: allocatableMemory}
}

type staticHost struct {
	layout      Layout
	mounter     SystemMounter
	allocatable int64
}

func (h staticHost) Layout() Layout                        { return h.layout }
func (h staticHost) Mounter() SystemMounter                { return h.mounter }
func (h staticHost) NodeAllocatableMemory() (int64, error) { return h.allocatable, nil }

// DeviceMountablePlugin is implemented by plugins whose volumes are
// attached or mounted once per node before pods use them (block devices,
// CSI with staging). Operations on their volumes are serialized
// volume-wide; for other plugins (emptyDir) each pod's operations on a
// volume are independent.
type DeviceMountablePlugin interface {
	Plugin
	DeviceMountable() bool
}

// IsDeviceMountable reports whether p's operations are volume-wide.
func IsDeviceMountable(p Plugin) bool {
	dm, ok := p.(DeviceMountablePlugin)
	return ok && dm.DeviceMountable()
}
