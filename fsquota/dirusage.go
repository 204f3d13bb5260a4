package fsquota

import (
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
//
// path is opened once (a final symlink is not followed): the project ID,
// the quota and the walk are all asked of that one directory, so a path
// someone changes meanwhile cannot make them describe different ones.
func (m *Manager) DirUsage(path string) (DirUsage, error) { return m.dirUsage(path) }
