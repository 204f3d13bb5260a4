package volumeplugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	k8svolume "k8s.io/kubernetes/pkg/volume"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/volume"
)

// PluginName is the name the kubelet knows the emptyDir plugin by.
const PluginName = emptydir.PluginName

// Plugin is nodevol's emptyDir plugin as a kubelet volume plugin. Create it
// with New (or ProbeVolumePlugins) and hand it to the kubelet's
// VolumePluginMgr in place of k8s.io/kubernetes/pkg/volume/emptydir's.
type Plugin struct {
	opts   []emptydir.Option
	logger klog.Logger
	// adopt and adoptReg: WithAdoption.
	adopt    bool
	adoptReg prometheus.Registerer

	host k8svolume.VolumeHost
	nv   *emptydir.Plugin
}

var (
	_ k8svolume.VolumePlugin                   = (*Plugin)(nil)
	_ k8svolume.ResizableEphemeralVolumePlugin = (*Plugin)(nil)
)

// Option configures a Plugin.
type Option func(*Plugin)

// WithQuotas makes Default volumes get project quotas (q is usually an
// *fsquota.Manager), as emptydir.WithQuotas does. Without it no quota is
// assigned; usage is then measured by walking the volume.
func WithQuotas(q emptydir.Quotas) Option {
	return func(p *Plugin) { p.opts = append(p.opts, emptydir.WithQuotas(q)) }
}

// WithAdoption makes SetUp adopt the tmpfs and hugetlbfs volumes the
// kubelet that ran before this one mounted (emptydir.WithAdoption): a node
// switched to nodevol in place, without a drain, keeps its running pods'
// Memory emptyDirs and their secret, configMap, downwardAPI and projected
// volumes served. The session in the kubelet root's session log opens at
// Init and lasts as long as the process. reg receives the counter of
// adopted volumes (nil: none).
func WithAdoption(reg prometheus.Registerer) Option {
	return func(p *Plugin) { p.adopt, p.adoptReg = true, reg }
}

// WithLogger sets the logger SetUp and TearDown log to (the kubelet's
// interfaces carry no context). The default is klog's global logger.
func WithLogger(l klog.Logger) Option { return func(p *Plugin) { p.logger = l } }

// New returns the plugin; the kubelet calls Init before anything else.
func New(opts ...Option) *Plugin {
	p := &Plugin{logger: klog.Background()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// ProbeVolumePlugins returns the plugin in the form the kubelet's plugin
// list takes, as upstream's emptydir.ProbeVolumePlugins does.
func ProbeVolumePlugins(opts ...Option) []k8svolume.VolumePlugin {
	return []k8svolume.VolumePlugin{New(opts...)}
}

// ErrNotInitialized is returned by a Plugin whose Init was not called.
var ErrNotInitialized = errors.New("volumeplugin: Init was not called")

// Init takes the kubelet root from host: the directory holding
// host.GetPodsDir(). Its pods/<uid>/volumes/kubernetes.io~empty-dir and
// plugins/kubernetes.io~empty-dir layout is the kubelet's, so a stock
// kubelet's Default volumes are served as they are; a tmpfs it mounted has
// no record nodevol can prove, and is adopted under the adoption rule with
// WithAdoption (otherwise its SetUp and teardown are refused until it is
// unmounted by hand; docs/kubelet.md).
func (p *Plugin) Init(host k8svolume.VolumeHost) error {
	pods := filepath.Clean(host.GetPodsDir())
	if filepath.Base(pods) != "pods" {
		return fmt.Errorf("volumeplugin: the kubelet's pods directory %q is not <root>/pods", pods)
	}
	layout, err := volume.NewLayout(filepath.Dir(pods))
	if err != nil {
		return fmt.Errorf("volumeplugin: %w", err)
	}
	p.host = host
	opts := p.opts
	if p.adopt {
		opts = append(opts[:len(opts):len(opts)], emptydir.WithAdoption(emptydir.Adoption{Logger: p.logger, Adopted: p.adoptedCounter()}))
	}
	p.nv = emptydir.New(nodeHost{layout: layout, host: host}, opts...)
	return nil
}

// adoptedCounter is what counts adoptions in
// nodevol_emptydir_adopted_volumes_total{medium} on the Registerer of
// WithAdoption: a counter of its own, or the one another plugin of this
// process registered there.
func (p *Plugin) adoptedCounter() func(volume.Medium) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: emptydir.AdoptedVolumesMetric, Help: emptydir.AdoptedVolumesHelp}, []string{"medium"})
	count := func(m volume.Medium) { c.WithLabelValues(m.String()).Inc() }
	if p.adoptReg == nil {
		return count
	}
	err := p.adoptReg.Register(c)
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(*prometheus.CounterVec); ok {
			c = existing
			return count
		}
	}
	if err != nil {
		p.logger.Error(err, "Registering the adopted-volumes metric")
	}
	return count
}

// Emptydir returns the nodevol plugin underneath (nil before Init), for
// what the kubelet's interfaces do not carry: PlanTearDown, Usage.
func (p *Plugin) Emptydir() *emptydir.Plugin { return p.nv }

// nodeHost is the node as nodevol's plugin sees it. nodevol makes its
// tmpfs and hugetlbfs mounts itself (detached, then attached onto the open
// volume directory), so the kubelet's mount.Interface is not used: a
// mounter that runs mount(8) cannot mount where nodevol needs it.
type nodeHost struct {
	layout volume.Layout
	host   k8svolume.VolumeHost
}

func (h nodeHost) Layout() volume.Layout         { return h.layout }
func (h nodeHost) Mounter() volume.SystemMounter { return nil }

func (h nodeHost) NodeAllocatableMemory() (int64, error) {
	alloc, err := h.host.GetNodeAllocatable()
	if err != nil {
		return 0, err
	}
	return alloc.Memory().Value(), nil
}

// GetPluginName returns PluginName.
func (p *Plugin) GetPluginName() string { return PluginName }

// GetVolumeName is the volume's name in the pod: an emptyDir lives and dies
// with its pod.
func (p *Plugin) GetVolumeName(spec *k8svolume.Spec) (string, error) {
	if spec == nil || spec.Volume == nil || spec.Volume.EmptyDir == nil {
		return "", errors.New("spec does not reference an emptyDir volume type")
	}
	return spec.Name(), nil
}

// CanSupport reports whether spec is an emptyDir volume.
func (p *Plugin) CanSupport(spec *k8svolume.Spec) bool {
	return spec != nil && spec.Volume != nil && spec.Volume.EmptyDir != nil
}

// RequiresRemount is false: a Memory volume is resized by
// ResizeEphemeralVolume, never by a remount from SetUp.
func (p *Plugin) RequiresRemount(*k8svolume.Spec) bool { return false }

// SupportsMountOption is false: emptyDir takes no mount options.
func (p *Plugin) SupportsMountOption() bool { return false }

// SupportsSELinuxContextMount is false: the kubelet relabels the volume.
func (p *Plugin) SupportsSELinuxContextMount(*k8svolume.Spec) (bool, error) { return false, nil }

// NewMounter returns the Mounter for spec in pod. A spec with no source at
// all is an emptyDir too, as in the kubelet.
//
// A spec whose name is not a volume name (a DNS label) but a single
// directory name — the kubelet's wrapper volumes are named
// "wrapped_<volume>" — gets a mounter too, for SetUpAt in another plugin's
// volume directory (see mounter.SetUpAt); its SetUp, which would use
// volumes/kubernetes.io~empty-dir/<name>, refuses.
func (p *Plugin) NewMounter(spec *k8svolume.Spec, pod *v1.Pod) (k8svolume.Mounter, error) {
	if p.nv == nil {
		return nil, ErrNotInitialized
	}
	if spec == nil || pod == nil {
		return nil, errors.New("volumeplugin: NewMounter needs a spec and a pod")
	}
	nvSpec := SpecOf(spec)
	nvPod := PodOf(pod)
	nameErr := volume.ValidateVolumeName(nvSpec.Name)
	if nameErr != nil {
		// A wrapper volume: its path names where an ordinary volume of
		// that name would be (GetPath), which SetUp refuses.
		path, err := p.nv.Layout().VolumeDir(nvPod.UID, PluginName, nvSpec.Name)
		if err != nil {
			return nil, err
		}
		return &mounter{volumeBase: p.base(nvPod.UID, nvSpec.Name, path), spec: nvSpec, pod: nvPod, nameErr: nameErr}, nil
	}
	m, err := p.nv.NewMounter(&nvSpec, nvPod)
	if err != nil {
		return nil, err
	}
	return &mounter{volumeBase: p.base(nvPod.UID, nvSpec.Name, m.Path()), spec: nvSpec, pod: nvPod, nv: m}, nil
}

// NewUnmounter returns the Unmounter of the volume name of the pod podUID.
func (p *Plugin) NewUnmounter(name string, podUID types.UID) (k8svolume.Unmounter, error) {
	if p.nv == nil {
		return nil, ErrNotInitialized
	}
	u, err := p.nv.NewUnmounter(name, string(podUID))
	if err != nil {
		return nil, err
	}
	return &unmounter{volumeBase: p.base(string(podUID), name, u.Path()), nv: u}, nil
}

// ConstructVolumeSpec rebuilds the spec of a volume found on disk after a
// kubelet restart, from what SetUp recorded (medium, size limit) or what
// is mounted on it, reached by descriptors (see emptydir.Plugin.ConstructSpec).
func (p *Plugin) ConstructVolumeSpec(volumeName, mountPath string) (k8svolume.ReconstructedVolume, error) {
	if p.nv == nil {
		return k8svolume.ReconstructedVolume{}, ErrNotInitialized
	}
	spec, err := p.nv.ConstructSpec(volumeName, mountPath)
	if err != nil {
		return k8svolume.ReconstructedVolume{}, err
	}
	src := &v1.EmptyDirVolumeSource{Medium: v1.StorageMedium(spec.EmptyDir.Medium)}
	if spec.EmptyDir.SizeLimit > 0 {
		src.SizeLimit = resource.NewQuantity(spec.EmptyDir.SizeLimit, resource.BinarySI)
	}
	if spec.EmptyDir.Mode != nil || spec.EmptyDir.StickyBit {
		mode := int32(spec.EmptyDir.EffectiveMode())
		src.Mode = &mode
	}
	vol := &v1.Volume{Name: volumeName, VolumeSource: v1.VolumeSource{EmptyDir: src}}
	return k8svolume.ReconstructedVolume{Spec: k8svolume.NewSpecFromVolume(vol)}, nil
}

// SpecOf converts a kubelet volume spec to nodevol's: its name, medium,
// size limit and, with the EmptyDirVolumeMode feature, its mode. A spec
// without a source is a Default emptyDir.
func SpecOf(spec *k8svolume.Spec) volume.Spec {
	out := volume.Spec{Name: spec.Name(), EmptyDir: &volume.EmptyDirSource{}}
	if spec.Volume == nil || spec.Volume.EmptyDir == nil {
		return out
	}
	src := spec.Volume.EmptyDir
	out.EmptyDir.Medium = volume.StorageMedium(src.Medium)
	if src.SizeLimit != nil {
		out.EmptyDir.SizeLimit = src.SizeLimit.Value()
	}
	if src.Mode != nil && utilfeature.DefaultFeatureGate.Enabled(features.EmptyDirVolumeMode) {
		// A negative mode becomes one far above 01777, which SetUp refuses.
		mode := uint32(*src.Mode)
		out.EmptyDir.Mode = &mode
	}
	return out
}

// PodOf converts what nodevol needs of a pod: its identity, its memory
// limit as the kubelet computes it for the pod's cgroup
// (cm.ResourceConfigForPod, so a Memory volume is never larger than what
// the pod may use), and the huge page sizes its containers, init
// containers and (with the PodLevelResources feature) the pod itself
// request, as the kubelet reads them (v1helper).
func PodOf(pod *v1.Pod) *volume.Pod {
	out := &volume.Pod{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name}
	if rc := cm.ResourceConfigForPod(pod, false, 100000, false, config.NoneMemoryReservationPolicy); rc != nil && rc.Memory != nil && *rc.Memory > 0 {
		out.MemoryLimit = *rc.Memory
	}
	var lists []v1.ResourceList
	if utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResources) && resourcehelper.IsPodLevelResourcesSet(pod) {
		lists = append(lists, pod.Spec.Resources.Requests)
	}
	for _, c := range append(append([]v1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...) {
		lists = append(lists, c.Resources.Requests)
	}
	for _, list := range lists {
		for name, q := range list {
			if !v1helper.IsHugePageResourceName(name) {
				continue
			}
			size, err := v1helper.HugePageSizeFromResourceName(name)
			if err != nil || size.Value() <= 0 {
				continue // the API server rejects such names; SetUp then finds no size
			}
			if out.HugePages == nil {
				out.HugePages = map[int64]int64{}
			}
			out.HugePages[size.Value()] += q.Value()
		}
	}
	return out
}

// ResizeEphemeralVolume resizes a Memory volume's tmpfs in place (see
// emptydir.Plugin.ResizeVolume): only the tmpfs SetUp made, never below
// what the volume holds. Other media, and adding or removing a size limit
// (newSize nil or zero), are refused, as in the kubelet.
func (p *Plugin) ResizeEphemeralVolume(spec *k8svolume.Spec, pod *v1.Pod, newSize *resource.Quantity) error {
	if p.nv == nil {
		return ErrNotInitialized
	}
	if spec == nil || spec.Volume == nil || spec.Volume.EmptyDir == nil {
		return errors.New("spec does not reference an emptyDir volume type")
	}
	if spec.Volume.EmptyDir.Medium != v1.StorageMediumMemory {
		return fmt.Errorf("volume %s: only memory-backed emptyDir volumes support direct resize", spec.Name())
	}
	if newSize == nil || newSize.Value() <= 0 {
		return fmt.Errorf("volume %s: addition or removal of size limit is not supported", spec.Name())
	}
	return p.nv.ResizeVolume(p.ctx(), string(pod.UID), spec.Name(), newSize.Value())
}

func (p *Plugin) ctx() context.Context { return klog.NewContext(context.Background(), p.logger) }
