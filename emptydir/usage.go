package emptydir

// UsageSource says where usage numbers came from.
type UsageSource string

// Usage sources.
const (
	SourceQuota  UsageSource = "quota"  // the volume's project quota
	SourceStatfs UsageSource = "statfs" // a tmpfs/hugetlbfs volume's own filesystem
	SourceWalk   UsageSource = "walk"   // a walk that stays on one mount, hard links once
)

// Usage is a volume's disk (or memory) use.
type Usage struct {
	Bytes  int64       `json:"bytes"`
	Inodes int64       `json:"inodes"`
	Source UsageSource `json:"source"`
	// UpperBound says that Bytes and Inodes, from a walk, may count some
	// hard-linked files more than once: the volume holds more than
	// mountdetect.MaxHardLinkedInodes of them, more than the walk
	// remembers (see mountdetect.Usage). They are never below the truth.
	UpperBound bool `json:"upperBound,omitempty"`
	// FS is the filesystem the volume lives on.
	FS FSStats `json:"fs"`
}

// FSStats is what statfs says of the filesystem a volume lives on: the
// volume's own tmpfs or hugetlbfs, or for a Default volume the pod
// directory's filesystem (a Default volume is on the pod directory's
// mount). It is asked through a descriptor of the volume's directory (or
// of the directory holding it), never by path, and a filesystem that is
// not proven the volume's own is never asked.
type FSStats struct {
	CapacityBytes  int64 `json:"capacityBytes"`
	AvailableBytes int64 `json:"availableBytes"` // to unprivileged users
	Inodes         int64 `json:"inodes"`
	InodesFree     int64 `json:"inodesFree"`
}

// Usage reports the use of a pod's emptyDir volume: from its project quota
// when one was assigned and the quota manager can read it, from the
// filesystem itself for tmpfs and hugetlbfs volumes, otherwise from a walk
// of the volume that stays on its mount and counts hard links once (up to
// mountdetect.MaxHardLinkedInodes of them: past that Usage.UpperBound); with
// the capacity of the filesystem it lives on (FS). The volume and its
// metadata are reached by descriptors from the kubelet root.
func (p *Plugin) Usage(podUID, vol string) (Usage, error) { return p.usage(ordinaryRef(podUID, vol)) }

// UsageAt is Usage for an emptyDir in another plugin's volume directory
// (see Location), such as a CSI node plugin's volume, with the same care:
// only a mount proven the volume's own is asked anything, and another
// location's record is an error (ErrOtherVolumesRecord).
func (p *Plugin) UsageAt(podUID string, loc Location) (Usage, error) {
	if err := loc.validate(); err != nil {
		return Usage{}, err
	}
	return p.usage(locatedRef(podUID, loc))
}
