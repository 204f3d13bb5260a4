package emptydir

import (
	"fmt"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/testhook"
	"github.com/nodevol/nodevol/volume"
)

// PluginName is the emptyDir plugin's name, as in the kubelet.
const PluginName = "kubernetes.io/empty-dir"

// Quotas is what the plugin needs from a project-quota implementation:
// *fsquota.Manager provides it. A nil Quotas means no quotas. Assign
// failing with an error matching errors.ErrUnsupported (a filesystem
// without project quotas) is not a SetUp failure: the volume simply has no
// project, and its usage is measured by walking.
type Quotas interface {
	// Assign gives path a project ID and (when limitBytes > 0 and enforcing)
	// a limit, and returns the ID.
	Assign(path string, limitBytes int64) (projectID uint32, err error)
	// Clear removes path's quota and releases its project ID.
	Clear(path string) error
	// Usage returns the bytes and inodes charged to path's project.
	Usage(path string) (bytes, inodes int64, err error)
}

// Plugin is the kubernetes.io/empty-dir volume plugin.
type Plugin struct {
	host   volume.Host
	quotas Quotas
	// hook is called at SetUp's and TearDown's crash points (and passed
	// on to RemoveAll); set by this package's tests only.
	hook testhook.Hook
}

var (
	_ volume.Plugin          = (*Plugin)(nil)
	_ volume.SpecConstructor = (*Plugin)(nil)
	_ volume.LayoutProvider  = (*Plugin)(nil)
	_ Quotas                 = (*fsquota.Manager)(nil)
)

// Option configures the plugin.
type Option interface{ apply(*Plugin) }

type optionFunc func(*Plugin)

func (f optionFunc) apply(p *Plugin) { f(p) }

// WithQuotas makes SetUp assign project quotas to Default volumes and
// TearDown clear them.
func WithQuotas(q Quotas) Option { return optionFunc(func(p *Plugin) { p.quotas = q }) }

// New returns the plugin for host.
func New(host volume.Host, opts ...Option) *Plugin {
	p := &Plugin{host: host}
	for _, o := range opts {
		o.apply(p)
	}
	return p
}

// Name returns PluginName.
func (p *Plugin) Name() string { return PluginName }

// Layout is the kubelet root's layout the plugin was built for (its Host's).
func (p *Plugin) Layout() volume.Layout { return p.host.Layout() }

// CanSupport reports whether spec is an emptyDir.
func (p *Plugin) CanSupport(spec *volume.Spec) bool { return spec != nil && spec.EmptyDir != nil }

// paths returns the volume directory and the metadata directory.
func (p *Plugin) paths(podUID, vol string) (dir, metaDir string, err error) {
	l := p.host.Layout()
	if dir, err = l.VolumeDir(podUID, PluginName, vol); err != nil {
		return "", "", err
	}
	if metaDir, err = l.PluginVolumeDir(podUID, PluginName, vol); err != nil {
		return "", "", err
	}
	return dir, metaDir, nil
}

// NewMounter returns the Mounter for spec in pod.
func (p *Plugin) NewMounter(spec *volume.Spec, pod *volume.Pod) (volume.Mounter, error) {
	if !p.CanSupport(spec) {
		return nil, fmt.Errorf("%s: spec %q is not an emptyDir", PluginName, spec.Name)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := volume.ValidatePodUID(pod.UID); err != nil {
		return nil, err
	}
	dir, _, err := p.paths(pod.UID, spec.Name)
	if err != nil {
		return nil, err
	}
	return &mounter{plugin: p, source: *spec.EmptyDir, pod: pod, name: spec.Name, dir: dir}, nil
}

// NewUnmounter returns the Unmounter for a volume of a pod; it needs no
// spec (the metadata file and the disk say what to undo).
func (p *Plugin) NewUnmounter(vol, podUID string) (volume.Unmounter, error) {
	dir, _, err := p.paths(podUID, vol)
	if err != nil {
		return nil, err
	}
	return &unmounter{plugin: p, podUID: podUID, vol: vol, dir: dir}, nil
}

// ConstructSpec rebuilds a volume's spec from disk (reconstruction after a
// restart): from the metadata file when there is one, else from what is
// mounted on the volume directory. Both are reached by descriptors from
// the kubelet root, and the metadata is read as a bounded regular file, so
// a hostile pod directory (a symlink, a FIFO or /dev/zero in place of the
// metadata) is an error, never a hang or a path out of the root.
func (p *Plugin) ConstructSpec(vol, volumePath string) (*volume.Spec, error) {
	vp, err := p.host.Layout().ParseVolumePath(volumePath)
	if err != nil {
		return nil, err
	}
	if vp.Plugin != PluginName || vp.Volume != vol {
		return nil, fmt.Errorf("%s: %s is not the emptyDir volume %q", PluginName, volumePath, vol)
	}
	medium, pageSize, sizeLimit, mode, sticky, err := p.constructMedium(vp.PodUID, vol)
	if err != nil {
		return nil, err
	}
	src := &volume.EmptyDirSource{Medium: medium.StorageMedium(pageSize), SizeLimit: sizeLimit, Mode: mode, StickyBit: sticky}
	if mode != nil && *mode&^volume.MaxEmptyDirMode != 0 {
		src.Mode = nil // a forged record: the default mode, never a setuid bit
	}
	return &volume.Spec{Name: vol, EmptyDir: src}, nil
}
