package volumeplugin

import (
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svolume "k8s.io/kubernetes/pkg/volume"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"

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
func (b *volumeBase) GetMetrics() (*k8svolume.Metrics, error) {
	m := &k8svolume.Metrics{Time: metav1.Now()}
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
// given a directory other than the volume's own.
var ErrOtherDirectory = errors.New("not the volume's own directory")

// checkDir refuses a directory other than the volume's.
func (b *volumeBase) checkDir(op, dir string) error {
	if filepath.Clean(dir) == b.path {
		return nil
	}
	return fmt.Errorf("%s %s: %w (%s): nodevol's emptyDir plugin acts only on pods/<uid>/volumes/%s/<volume>",
		op, dir, ErrOtherDirectory, b.path, "kubernetes.io~empty-dir")
}

// mounter sets one volume up.
type mounter struct {
	volumeBase
	nv volume.Mounter
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
func (m *mounter) SetUp(args k8svolume.MounterArgs) error {
	return kubeletError(m.nv.SetUp(m.plugin.ctx(), volume.MounterArgs{FSGroup: args.FsGroup}))
}

// SetUpAt sets the volume up at dir, which must be the volume's own
// directory (GetPath).
func (m *mounter) SetUpAt(dir string, args k8svolume.MounterArgs) error {
	if err := m.checkDir("SetUpAt", dir); err != nil {
		return err
	}
	return m.SetUp(args)
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

// TearDownAt tears the volume down at dir, which must be the volume's own
// directory (GetPath).
func (u *unmounter) TearDownAt(dir string) error {
	if err := u.checkDir("TearDownAt", dir); err != nil {
		return err
	}
	return u.TearDown()
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
