package emptydir

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// setupPlan is what SetUp will create for one volume, derived from the
// spec and the pod before anything is touched.
type setupPlan struct {
	medium   volume.Medium
	size     int64 // tmpfs size= in bytes; 0: no size option
	pageSize int64 // hugetlbfs pagesize= in bytes
	// mode is the volume directory's mode (the mount root's for Memory
	// and HugePages): the source's Mode or 0777 (01777 for Memory), plus
	// StickyBit's bit.
	mode uint32
}

// planSetUp checks the spec against the pod and computes sizes:
//
//   - Memory: tmpfs size is the smallest positive of the node's allocatable
//     memory, the pod's memory limit and the volume's sizeLimit;
//   - the mode is the source's Mode (0 to 01777) or 0777, with the sticky
//     bit when StickyBit is set; a Memory volume without a Mode is 01777,
//     as the kubelet's is (its tmpfs root keeps tmpfs's default mode,
//     which Kubernetes's NodeConformance specs pin: a subPath the kubelet
//     creates in it copies the root's mode, sticky bit included);
//   - HugePages: the page size is the only hugepage size the pod requests;
//     HugePages-<size>: that size, which the pod must request.
func planSetUp(src *volume.EmptyDirSource, pod *volume.Pod, allocatable int64) (setupPlan, error) {
	if src.Mode != nil && *src.Mode&^volume.MaxEmptyDirMode != 0 {
		return setupPlan{}, fmt.Errorf("emptyDir mode %#o is not a permission mode with an optional sticky bit (0 to 01777)", *src.Mode)
	}
	p := setupPlan{mode: src.EffectiveMode()}
	switch m := src.Medium; {
	case m == volume.StorageMediumDefault:
		p.medium = volume.MediumDefault
	case m == volume.StorageMediumMemory:
		p.medium = volume.MediumMemory
		if src.Mode == nil {
			p.mode |= 0o1000
		}
		p.size = smallestPositive(allocatable, pod.MemoryLimit, src.SizeLimit)
	case m.IsHugePages():
		p.medium = volume.MediumHugePages
		size, err := hugePageSize(m, pod)
		if err != nil {
			return p, err
		}
		p.pageSize = size
	default:
		return p, fmt.Errorf("unknown emptyDir medium %q (want \"\", Memory, HugePages or HugePages-<size>)", m)
	}
	return p, nil
}

func smallestPositive(vals ...int64) int64 {
	var best int64
	for _, v := range vals {
		if v > 0 && (best == 0 || v < best) {
			best = v
		}
	}
	return best
}

func hugePageSize(m volume.StorageMedium, pod *volume.Pod) (int64, error) {
	if m == volume.StorageMediumHugePages {
		if len(pod.HugePages) == 0 {
			return 0, fmt.Errorf("medium HugePages: the pod requests no huge pages")
		}
		if len(pod.HugePages) > 1 {
			var sizes []string
			for s := range pod.HugePages {
				sizes = append(sizes, volume.FormatQuantity(s))
			}
			return 0, fmt.Errorf("medium HugePages: the pod requests several huge page sizes (%s); use HugePages-<size>", strings.Join(slices.Sorted(slices.Values(sizes)), ", "))
		}
		for s := range pod.HugePages {
			if s <= 0 {
				return 0, fmt.Errorf("medium HugePages: invalid page size %d", s)
			}
			return s, nil
		}
	}
	sizeStr := strings.TrimPrefix(string(m), string(volume.StorageMediumHugePagesPrefix))
	size, err := volume.ParseQuantity(sizeStr)
	if err != nil || size <= 0 {
		return 0, fmt.Errorf("medium %q: invalid page size %q", m, sizeStr)
	}
	if _, ok := pod.HugePages[size]; !ok {
		return 0, fmt.Errorf("medium %q: the pod requests no huge pages of size %s", m, volume.FormatQuantity(size))
	}
	return size, nil
}

// MediumOf is the emptyDir medium of what mountdetect found: Memory for
// the root of a tmpfs mount, HugePages for the root of a hugetlbfs mount,
// Default otherwise (a directory inside a tmpfs is Default too).
func MediumOf(info mountdetect.FSInfo) volume.Medium {
	if !info.MountPoint {
		return volume.MediumDefault
	}
	switch info.Magic {
	case mountdetect.MagicTmpfs:
		return volume.MediumMemory
	case mountdetect.MagicHugetlbfs:
		return volume.MediumHugePages
	}
	return volume.MediumDefault
}
