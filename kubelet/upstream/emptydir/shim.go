// Package emptydir runs upstream's pkg/volume/emptydir tests
// (empty_dir_test.go of k8s.io/kubernetes v1.37.2, verbatim, added by
// hack/upstream through go test -overlay) against nodevol's kubelet
// plugin, github.com/nodevol/nodevol/kubelet/volumeplugin.
//
// This file gives the tests the package-level names they use. Each either
// is the adapter itself, or asks nodevol: ProbeVolumePlugins returns the
// adapter; the sizing functions ask emptydir.MountSizes, the rules SetUp
// follows, through the adapter's pod and spec conversion. The names that
// exist only because tests of upstream's private fakes must compile (a
// mount detector, upstream's emptyDir struct, getPageSize) belong to tests
// listed as not applicable in UPSTREAM, which are not run.
package emptydir

//lint:file-ignore U1000 the names here are used by the upstream test file that hack/upstream adds with go test -overlay, which staticcheck does not see

import (
	"errors"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/mount-utils"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/kubelet/volumeplugin"
	nvvolume "github.com/nodevol/nodevol/volume"
)

// perm is the mode of a volume directory without a Mode: 0777, as
// upstream's (nodevol sets it whatever the umask).
const perm os.FileMode = 0777

// ProbeVolumePlugins returns nodevol's plugin, with the names the tests
// reach through a type assertion.
func ProbeVolumePlugins() []volume.VolumePlugin {
	return []volume.VolumePlugin{&emptyDirPlugin{Plugin: volumeplugin.New()}}
}

// emptyDirPlugin is the adapter, plus the host the tests read back.
type emptyDirPlugin struct {
	*volumeplugin.Plugin
	host volume.VolumeHost
}

func (p *emptyDirPlugin) Init(host volume.VolumeHost) error {
	p.host = host
	return p.Plugin.Init(host)
}

// newMounterInternal is NewMounter: nodevol asks the kernel what is
// mounted and mounts itself, so the mounter and detector the tests pass
// are not consulted.
func (p *emptyDirPlugin) newMounterInternal(spec *volume.Spec, pod *v1.Pod, _ mount.Interface, _ mountDetector) (volume.Mounter, error) {
	return p.NewMounter(spec, pod)
}

// newUnmounterInternal is NewUnmounter, as newMounterInternal is NewMounter.
func (p *emptyDirPlugin) newUnmounterInternal(volName string, podUID types.UID, _ mount.Interface, _ mountDetector) (volume.Unmounter, error) {
	return p.NewUnmounter(volName, podUID)
}

// getPageSizeMountOption is the pagesize= option of the hugetlbfs SetUp
// would mount: nodevol's page size for the medium and the pod.
func getPageSizeMountOption(medium v1.StorageMedium, pod *v1.Pod) (string, error) {
	_, size, err := emptydir.MountSizes(nvvolume.EmptyDirSource{Medium: nvvolume.StorageMedium(medium)}, volumeplugin.PodOf(pod), 0)
	if err != nil {
		return "", err
	}
	return "pagesize=" + resource.NewQuantity(size, resource.BinarySI).String(), nil
}

// calculateEmptyDirMemorySize is the size of the tmpfs SetUp would mount.
func calculateEmptyDirMemorySize(nodeAllocatableMemory *resource.Quantity, spec *volume.Spec, pod *v1.Pod) *resource.Quantity {
	size, _, err := emptydir.MountSizes(*volumeplugin.SpecOf(spec).EmptyDir, volumeplugin.PodOf(pod), nodeAllocatableMemory.Value())
	if err != nil {
		return nil
	}
	return resource.NewQuantity(size, resource.BinarySI)
}

// errNotApplicable is what the names below return: they exist so that the
// upstream file compiles; their tests are listed as not applicable.
var errNotApplicable = errors.New("upstream private mechanism: not part of nodevol")

// mountDetector is upstream's private medium detector interface.
type mountDetector interface {
	GetMountMedium(path string, requestedMedium v1.StorageMedium) (v1.StorageMedium, bool, *resource.Quantity, error)
}

// emptyDir has the fields tests of upstream's private methods set.
type emptyDir struct {
	pod           *v1.Pod
	medium        v1.StorageMedium
	sizeLimit     *resource.Quantity
	mounter       mount.Interface
	mountDetector mountDetector
}

func (ed *emptyDir) setupHugepages(string) error                      { return errNotApplicable }
func (ed *emptyDir) generateTmpfsMountOptions(bool) []string          { return nil }
func getPageSize(string, mount.Interface) (*resource.Quantity, error) { return nil, errNotApplicable }
