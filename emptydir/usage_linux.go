package emptydir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func (p *Plugin) usage(r volRef) (Usage, error) {
	dir, err := p.refPath(r)
	if err != nil {
		return Usage{}, err
	}
	v, err := p.openVolume(r, false)
	if err != nil {
		return Usage{}, err
	}
	defer v.Close()
	meta, err := v.readMeta()
	if err != nil {
		return Usage{}, err
	}
	e, err := v.openEntry()
	if err != nil {
		return Usage{}, err
	}
	defer e.Close()
	switch e.kind {
	case entryMissing:
		return Usage{}, &os.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	case entryDir:
	default:
		return Usage{}, &os.PathError{Op: "open", Path: dir, Err: unix.ENOTDIR}
	}
	if p.quotas != nil && meta != nil && meta.QuotaProjectID != 0 && !e.Root {
		// The project of the directory open as e, asked through e.
		u, err := p.quotas.Usage(e.Fd, dir)
		if err == nil && u.ProjectID != meta.QuotaProjectID {
			// Retagged (its owner may): another project's numbers are
			// not the volume's.
			err = fmt.Errorf("%w: the directory carries project %d, not the recorded %d", fsquota.ErrNoProject, u.ProjectID, meta.QuotaProjectID)
		}
		if err == nil {
			fs, _, err := statfs(e.Fd, dir)
			return Usage{Bytes: u.Bytes, Inodes: u.Inodes, Source: SourceQuota, FS: fs}, err
		}
		// Unsupported, or the directory lost its project ID: walk instead.
		if !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, fsquota.ErrNoProject) {
			return Usage{}, fmt.Errorf("quota usage of %s: %w", dir, err)
		}
	}
	if e.Root {
		// Only the volume's own tmpfs or hugetlbfs is asked anything (a
		// foreign filesystem's daemon may not answer).
		var rec *mountRecord
		if meta != nil {
			rec = meta.Mount
		}
		ours, err := recordedMountOn(e, dir, rec, r)
		if err != nil {
			return Usage{}, err
		}
		if !ours {
			why := "something is mounted on the volume directory that SetUp did not make (or cannot prove it made)"
			if rec != nil && !isNodevolSource(rec.Source) {
				why = unknownSourceRecord(rec)
			}
			return Usage{}, fmt.Errorf("usage of %s: %w: %s; it is not measured", dir, ErrForeignMount, why)
		}
		fs, st, err := statfs(e.Fd, dir)
		if err != nil {
			return Usage{}, err
		}
		return Usage{Bytes: int64(st.Blocks-st.Bfree) * int64(st.Bsize), Inodes: int64(st.Files - st.Ffree), Source: SourceStatfs, FS: fs}, nil
	}
	// The walk starts at the open directory, named by its descriptor.
	u, err := mountdetect.DiskUsageFile(e.Fd, dir)
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %s: %w", dir, err)
	}
	fs, _, err := statfs(e.Fd, dir)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Bytes: u.Bytes, Inodes: u.Inodes, Source: SourceWalk, UpperBound: u.UpperBound, FS: fs}, nil
}

// statfs asks statfs about the filesystem of the open directory fd.
func statfs(fd int, path string) (FSStats, unix.Statfs_t, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return FSStats{}, st, &os.PathError{Op: "fstatfs", Path: path, Err: err}
	}
	bs := int64(st.Bsize)
	return FSStats{
		CapacityBytes:  int64(st.Blocks) * bs,
		AvailableBytes: int64(st.Bavail) * bs,
		Inodes:         int64(st.Files),
		InodesFree:     int64(st.Ffree),
	}, st, nil
}

// constructMedium is what ConstructSpec needs: the recorded medium, or
// what is mounted on the volume directory when nothing was recorded.
// The recorded mode (the spec's Mode and StickyBit) comes back with them.
func (p *Plugin) constructMedium(podUID, vol string) (medium volume.Medium, pageSize, sizeLimit int64, mode *uint32, sticky bool, err error) {
	v, err := p.openVolume(ordinaryRef(podUID, vol), false)
	if err != nil {
		return 0, 0, 0, nil, false, err
	}
	defer v.Close()
	meta, err := v.readMeta()
	if err != nil {
		return 0, 0, 0, nil, false, err
	}
	if meta != nil {
		return meta.Medium, meta.HugePageSize, meta.SizeLimit, meta.Mode, meta.StickyBit, nil
	}
	e, err := v.openEntry()
	if err != nil {
		return volume.MediumDefault, 0, 0, nil, false, err
	}
	defer e.Close()
	if e.kind != entryDir || !e.Root {
		return volume.MediumDefault, 0, 0, nil, false, nil
	}
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		return 0, 0, 0, nil, false, err
	}
	// The type from the table; only a tmpfs or hugetlbfs is asked for more
	// (a foreign filesystem's daemon may not answer).
	info := infoOnDir(tab, e)
	if MediumOf(info) == volume.MediumDefault {
		return volume.MediumDefault, 0, 0, nil, false, nil
	}
	if info, err = tab.DetectFile(e.Fd, v.dir); err != nil {
		return 0, 0, 0, nil, false, err
	}
	return MediumOf(info), info.HugePageSize, 0, nil, false, nil
}
