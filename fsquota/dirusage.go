package fsquota

import (
	"errors"
	"fmt"

	"github.com/nodevol/nodevol/mountdetect"
)

// Source says where the numbers of a DirUsage came from.
type Source int

// Sources of DirUsage numbers.
const (
	SourceQuota Source = iota + 1 // the directory's project quota
	SourceWalk                    // mountdetect.DiskUsage: one mount, hard links once
)

// String is "quota" or "walk".
func (s Source) String() string {
	switch s {
	case SourceQuota:
		return "quota"
	case SourceWalk:
		return "walk"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// DirUsage is what a directory uses, and where the numbers came from.
type DirUsage struct {
	Bytes     int64
	Inodes    int64
	Source    Source
	ProjectID uint32 // the directory's project ID, 0 when it carries none
	// Skipped lists, after a walk, the mounts beneath the directory,
	// which are not counted.
	Skipped []mountdetect.Mount
	// UpperBound says, after a walk, that Bytes and Inodes may count some
	// hard-linked files more than once (see mountdetect.Usage).
	UpperBound bool
	// NoQuota says, after a walk, why the quota was not used: an error
	// that matches ErrNoProject (the directory carries no project ID, or
	// the kernel knows no such project) or ErrUnsupported (no project
	// quotas here).
	NoQuota error
}

// DirUsage reports the use of the directory at path, which need not be a
// volume: from its project quota when it carries a project ID and the
// kernel accounts for the project, otherwise from mountdetect.DiskUsage, a
// walk that stays on the directory's mount and counts hard links once. The
// fallback is the emptyDir plugin's: an unsupported filesystem or a missing
// project means a walk; any other failure is returned, with ProjectID set
// when it could be read.
func (m *Manager) DirUsage(path string) (DirUsage, error) {
	var d DirUsage
	id, err := ProjectID(path)
	switch {
	case err == nil:
		d.ProjectID = id
	case errors.Is(err, errors.ErrUnsupported):
		d.NoQuota = err
	default:
		return DirUsage{}, err
	}
	if d.ProjectID != 0 {
		u, err := m.ProjectUsage(path)
		if err == nil {
			d.Bytes, d.Inodes, d.Source = u.Bytes, u.Inodes, SourceQuota
			return d, nil
		}
		if !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, ErrNoProject) {
			return DirUsage{ProjectID: d.ProjectID}, err
		}
		d.NoQuota = err
	} else if d.NoQuota == nil {
		d.NoQuota = fmt.Errorf("the %w", ErrNoProject) // "the directory has no project ID"
	}
	u, err := mountdetect.DiskUsage(path)
	if err != nil {
		return DirUsage{ProjectID: d.ProjectID}, err
	}
	d.Bytes, d.Inodes, d.Source, d.Skipped = u.Bytes, u.Inodes, SourceWalk, u.Skipped
	d.UpperBound = u.UpperBound
	return d, nil
}
