package mountdetect

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

type tableEntry struct {
	Mount
	id      int
	options string // per-mount and superblock options
}

type mountTableData struct {
	entries []tableEntry // sorted by mount point, stable in table order
}

func readMountTable() (*MountTable, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	t := &MountTable{}
	t.entries = make([]tableEntry, len(infos))
	for i, m := range infos {
		t.entries[i] = tableEntry{
			Mount:   Mount{MountPoint: m.Mountpoint, FSType: m.FSType, Source: m.Source},
			id:      m.ID,
			options: m.VFSOptions + "," + m.Options,
		}
	}
	slices.SortStableFunc(t.entries, func(a, b tableEntry) int { return strings.Compare(a.MountPoint, b.MountPoint) })
	return t, nil
}

// beneath returns the mounts strictly beneath the resolved directory real.
// Mount points beneath real sort right after real+"/", so a binary search
// finds the start and the run ends at the first non-match.
func (t *MountTable) beneath(real string) []Mount {
	prefix := real + "/"
	if real == "/" {
		prefix = "/"
	}
	i := sort.Search(len(t.entries), func(i int) bool { return t.entries[i].MountPoint >= prefix })
	var out []Mount
	for ; i < len(t.entries) && strings.HasPrefix(t.entries[i].MountPoint, prefix); i++ {
		if t.entries[i].MountPoint != real {
			out = append(out, t.entries[i].Mount)
		}
	}
	return out
}

func (t *MountTable) nestedMounts(path string) ([]Mount, error) {
	fd, err := openat(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	real, err := fdPath(fd, path)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	return t.beneath(real), nil
}

// hugePageSizeOf is hugePageSizeOf from the table: the pagesize= option of
// the mount (found by the mount ID statx reports) that fd is on.
func (t *MountTable) hugePageSizeOf(fd int, path string) (int64, error) {
	var sx unix.Statx_t
	err := ignoringEINTR(func() error {
		return unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sx)
	})
	if err != nil || sx.Mask&unix.STATX_MNT_ID == 0 {
		return hugePageSizeOf(fd, path) // no mount IDs: the slow path
	}
	for _, e := range t.entries {
		if e.id != int(sx.Mnt_id) {
			continue
		}
		size, _, err := ParseHugePageSize(e.options)
		if err != nil {
			return 0, fmt.Errorf("hugetlbfs mount %s: %w", e.MountPoint, err)
		}
		return size, nil
	}
	return 0, nil // mounted after the table was read: fall back to the block size
}
