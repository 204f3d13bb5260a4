package fsquota

import (
	"errors"
	"fmt"

	"github.com/nodevol/nodevol/mountdetect"
)

func (m *Manager) dirUsage(path string) (DirUsage, error) {
	r, err := m.openPath(path)
	if err != nil {
		return DirUsage{}, err
	}
	defer r.close()
	var d DirUsage
	if x, err := getFsxattr(r.fd); err == nil {
		d.ProjectID = x.Projid
	} else if err = fsxattrErr(path, "FS_IOC_FSGETXATTR", err); errors.Is(err, errors.ErrUnsupported) {
		d.NoQuota = err
	} else {
		return DirUsage{}, err
	}
	if d.ProjectID != 0 {
		u, err := m.usageOf(r)
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
	u, err := mountdetect.DiskUsageFile(r.fd, path)
	if err != nil {
		return DirUsage{ProjectID: d.ProjectID}, err
	}
	d.Bytes, d.Inodes, d.Source, d.Skipped = u.Bytes, u.Inodes, SourceWalk, u.Skipped
	d.UpperBound = u.UpperBound
	return d, nil
}
