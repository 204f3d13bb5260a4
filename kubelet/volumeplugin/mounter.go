package volumeplugin

import (
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svolume "k8s.io/kubernetes/pkg/volume"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/volume"
)

// volumeBase is what a mounter and an unmounter share: the volume's
// identity, its path and its metrics.
type volumeBase struct {
	plugin      *Plugin
	podUID, vol string
	path        string
}

func (p *Plugin) base(podUID, vol, path string) volumeBase {
	return volumeBase{plugin: p, podUID: podUID, vol: vol, path: path}
}

// GetPath is the volume directory.
func (b *volumeBase) GetPath() string { return b.path }

// GetMetrics reports the volume's use (from its project quota, its own
// tmpfs or hugetlbfs, or a walk that stays on its mount and counts hard
// links once) and the capacity of the filesystem it lives on, everything
// reached by descriptors from the kubelet root (emptydir.Plugin.Usage).
//
// A wrapper volume's mounter (a name that is not a volume name, such as
// the kubelet's "wrapped_<volume>") has no metrics of its own: the error
// matches emptydir.ErrLocatedUnsupported (the plugin that wraps it
// measures its own directory).
func (b *volumeBase) GetMetrics() (*k8svolume.Metrics, error) {
	m := &k8svolume.Metrics{Time: metav1.Now()}
	if err := volume.ValidateVolumeName(b.vol); err != nil {
		return m, fmt.Errorf("metrics of %s: %w (a wrapper volume: %w)", b.path, emptydir.ErrLocatedUnsupported, err)
	}
	u, err := b.plugin.nv.Usage(b.podUID, b.vol)
	if err != nil {
		return m, err
	}
	q := func(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }
	m.Used, m.InodesUsed = q(u.Bytes), q(u.Inodes)
	m.Capacity, m.Available = q(u.FS.CapacityBytes), q(u.FS.AvailableBytes)
	m.Inodes, m.InodesFree = q(u.FS.Inodes), q(u.FS.InodesFree)
	return m, nil
}

// ErrOtherDirectory is matched by the error of SetUpAt and TearDownAt
// given a directory they do not serve: one that is not a volume directory
// of the same pod under this kubelet root, or another emptyDir's.
var ErrOtherDirectory = errors.New("not a directory this volume may use")

// locate says where SetUpAt or TearDownAt at dir acts: nil for the
// volume's own directory, else the Location of an emptyDir in another
// plugin's volume directory of the same pod (the kubelet's wrapper
// volumes), whose metadata is kept under the volume's name (the kubelet's
// "wrapped_<volume>"). Anything else is refused (ErrOtherDirectory).
func (b *volumeBase) locate(op, dir string) (*emptydir.Location, error) {
	if filepath.Clean(dir) == b.path {
		return nil, nil
	}
	bad := func(why string, err error) error {
		if err != nil {
			return fmt.Errorf("%s %s: %w: %s: %w", op, dir, ErrOtherDirectory, why, err)
		}
		return fmt.Errorf("%s %s: %w: %s", op, dir, ErrOtherDirectory, why)
	}
	vp, err := b.plugin.nv.Layout().ParseVolumePath(dir)
	switch {
	case err != nil:
		return nil, bad("not pods/<uid>/volumes/<plugin>/<volume> under the kubelet root", err)
	case vp.PodUID != b.podUID:
		return nil, bad("a volume directory of pod "+vp.PodUID+", not of pod "+b.podUID, nil)
	case vp.Plugin == PluginName:
		return nil, bad("another emptyDir's directory (this volume's is "+b.path+")", nil)
	}
	return &emptydir.Location{Plugin: vp.Plugin, Dir: vp.Volume, Meta: b.vol}, nil
}

// mounter sets one volume up.
type mounter struct {
	volumeBase
	spec volume.Spec
	pod  *volume.Pod
	// nv is nodevol's mounter of the volume's own directory; nil for a
	// name that is not a volume name (nameErr says why), which only
	// SetUpAt in another plugin's directory serves.
	nv      volume.Mounter
	nameErr error
}

// GetAttributes: read-write, managed (the kubelet applies fsGroup), and
// relabelled for SELinux by the kubelet.
func (m *mounter) GetAttributes() k8svolume.Attributes {
	return k8svolume.Attributes{ReadOnly: false, Managed: true, SELinuxRelabel: true}
}

// SetUp sets the volume up (see emptydir's SetUp): a directory, a tmpfs or
// a hugetlbfs, with the pod's fsGroup as its group.
//
// A failure after SetUp touched the disk is returned as a
// *volumetypes.UncertainProgressError carrying nodevol's message, the only
// form in which the kubelet marks the volume uncertain (and so tears it
// down when the pod goes); other failures are nodevol's errors as they are.
//
// A mounter whose name is not a volume name (a wrapper volume's
// "wrapped_<volume>") has no directory of its own: SetUp refuses it (the
// error matches volume.ErrInvalidName).
func (m *mounter) SetUp(args k8svolume.MounterArgs) error {
	if m.nv == nil {
		return fmt.Errorf("SetUp %s: %w; such a name is served only by SetUpAt in another plugin's volume directory", m.path, m.nameErr)
	}
	return kubeletError(m.nv.SetUp(m.plugin.ctx(), volume.MounterArgs{FSGroup: args.FsGroup}))
}

// SetUpAt sets the volume up at dir: the volume's own directory (GetPath),
// as SetUp does, or another plugin's volume directory of the same pod, as
// the kubelet's secret, configMap, downwardAPI and projected plugins ask
// through their wrapper mounter (volumes/kubernetes.io~secret/<volume>,
// with this mounter named "wrapped_<volume>"): an emptyDir at that
// location (emptydir.Plugin.NewMounterAt) whose metadata is kept under
// this mounter's name, with the same guarantees. Any other directory is
// refused (ErrOtherDirectory).
func (m *mounter) SetUpAt(dir string, args k8svolume.MounterArgs) error {
	loc, err := m.locate("SetUpAt", dir)
	if err != nil || loc == nil {
		if err != nil {
			return err
		}
		return m.SetUp(args)
	}
	nm, err := m.plugin.nv.NewMounterAt(&m.spec, m.pod, *loc)
	if err != nil {
		return fmt.Errorf("SetUpAt %s: %w", dir, err)
	}
	return kubeletError(nm.SetUp(m.plugin.ctx(), volume.MounterArgs{FSGroup: args.FsGroup}))
}

// unmounter tears one volume down.
type unmounter struct {
	volumeBase
	nv volume.Unmounter
}

// TearDown tears the volume down (see emptydir's TearDown): never deleting
// data on another mount, never unmounting a mount SetUp did not make. A
// refusal leaves everything in place and is returned; the kubelet retries.
func (u *unmounter) TearDown() error { return u.nv.TearDown(u.plugin.ctx()) }

// TearDownAt tears the volume down at dir: the volume's own directory
// (GetPath), as TearDown does, or another plugin's volume directory of
// the same pod, as the kubelet's UnmountViaEmptyDir asks for a wrapper
// volume (emptydir.Plugin.NewUnmounterAt, the metadata under this
// unmounter's name), with the same guarantees. Any other directory is
// refused (ErrOtherDirectory).
func (u *unmounter) TearDownAt(dir string) error {
	loc, err := u.locate("TearDownAt", dir)
	if err != nil || loc == nil {
		if err != nil {
			return err
		}
		return u.TearDown()
	}
	nu, err := u.plugin.nv.NewUnmounterAt(u.podUID, *loc)
	if err != nil {
		return fmt.Errorf("TearDownAt %s: %w", dir, err)
	}
	return nu.TearDown(u.plugin.ctx())
}

// kubeletError converts nodevol's Uncertain failures to the type the
// kubelet recognises (by type assertion, not errors.As).
func kubeletError(err error) error {
	var oe *volume.OperationError
	if errors.As(err, &oe) && oe.Kind == volume.Uncertain {
		return volumetypes.NewUncertainProgressError(err.Error())
	}
	return err
}
