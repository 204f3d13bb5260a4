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
}

// Usage reports the use of a pod's emptyDir volume: from its project quota
// when one was assigned and the quota manager can read it, from the
// filesystem itself for tmpfs and hugetlbfs volumes, otherwise from a walk
// of the volume that stays on its mount and counts hard links once. The
// volume and its metadata are reached by descriptors from the kubelet root.
func (p *Plugin) Usage(podUID, vol string) (Usage, error) { return p.usage(podUID, vol) }
