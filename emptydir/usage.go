package emptydir

import (
	"errors"
	"fmt"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/mountdetect"
)

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
// of the volume that stays on its mount and counts hard links once.
func (p *Plugin) Usage(podUID, vol string) (Usage, error) {
	dir, metaDir, err := p.paths(podUID, vol)
	if err != nil {
		return Usage{}, err
	}
	meta, err := readMetadata(metaDir)
	if err != nil {
		return Usage{}, err
	}
	if p.quotas != nil && meta != nil && meta.QuotaProjectID != 0 {
		bytes, inodes, err := p.quotas.Usage(dir)
		if err == nil {
			return Usage{Bytes: bytes, Inodes: inodes, Source: SourceQuota}, nil
		}
		// Unsupported, or the directory lost its project ID: walk instead.
		if !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, fsquota.ErrNoProject) {
			return Usage{}, fmt.Errorf("quota usage of %s: %w", dir, err)
		}
	}
	info, err := mountdetect.Detect(dir)
	if err != nil {
		return Usage{}, err
	}
	if info.MountPoint && info.Medium != mountdetect.MediumDefault {
		bytes, inodes, err := statfsUsage(dir)
		if err != nil {
			return Usage{}, err
		}
		return Usage{Bytes: bytes, Inodes: inodes, Source: SourceStatfs}, nil
	}
	u, err := mountdetect.DiskUsage(dir)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Bytes: u.Bytes, Inodes: u.Inodes, Source: SourceWalk}, nil
}
