package emptydir

import "github.com/nodevol/nodevol/volume"

// MountSizes says, without touching anything, what SetUp would mount for
// an emptyDir source in pod on a node with allocatableMemory bytes of
// allocatable memory (0 when unknown), by the rules SetUp follows:
//
//   - Memory: tmpfsSize is the smallest positive of allocatableMemory, the
//     pod's memory limit and the source's SizeLimit (0: no size option, the
//     kernel's default of half the RAM);
//   - HugePages: hugePageSize is the only huge page size the pod requests;
//     HugePages-<size>: that size, which the pod must request;
//   - Default: both are 0.
//
// An error says why SetUp would refuse the source (an unknown medium, a
// page size the pod does not request).
func MountSizes(src volume.EmptyDirSource, pod *volume.Pod, allocatableMemory int64) (tmpfsSize, hugePageSize int64, err error) {
	if pod == nil {
		pod = &volume.Pod{}
	}
	plan, err := planSetUp(&src, pod, allocatableMemory)
	if err != nil {
		return 0, 0, err
	}
	return plan.size, plan.pageSize, nil
}
