package mountdetect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// strategy is how mount boundaries are detected. Tests force each one so
// that one table of cases runs against every strategy the kernel offers.
type strategy int

const (
	strategyAuto        strategy = iota
	strategyStatxUnique          // statx STATX_MNT_ID_UNIQUE + STATX_ATTR_MOUNT_ROOT (6.8+)
	strategyStatxMntID           // statx STATX_MNT_ID + STATX_ATTR_MOUNT_ROOT (5.8+)
	strategyOpenat2              // openat2 RESOLVE_NO_XDEV (5.6+)
	strategyMountinfo            // one read of /proc/self/mountinfo (mount points only)
	strategyStdev                // st_dev comparison: blind to same-filesystem bind mounts
)

func (s strategy) String() string {
	switch s {
	case strategyAuto:
		return "auto"
	case strategyStatxUnique:
		return "statx-mnt-id-unique"
	case strategyStatxMntID:
		return "statx-mnt-id"
	case strategyOpenat2:
		return "openat2"
	case strategyMountinfo:
		return "mountinfo"
	case strategyStdev:
		return "st_dev"
	}
	return "strategy(" + strconv.Itoa(int(s)) + ")"
}

// walkSafe reports whether a strategy can check every directory of a walk
// for a mount boundary, including same-filesystem bind mounts.
func (s strategy) walkSafe() bool {
	return s == strategyStatxUnique || s == strategyStatxMntID || s == strategyOpenat2
}

// mountQuery is what fsat.StatMount is asked for the strategy's mount ID
// (0: the strategy uses none).
func (s strategy) mountQuery() fsat.MountQuery {
	switch s {
	case strategyStatxUnique:
		return fsat.MountKey
	case strategyStatxMntID:
		return fsat.TableID
	}
	return 0
}

// statMount is fsat.StatMount with a kernel that gives no mount IDs
// reported as this package's ErrUnsupported.
func statMount(dirfd int, name string, q fsat.MountQuery) (fsat.MountStat, error) {
	s, err := fsat.StatMount(dirfd, name, q)
	if errors.Is(err, fsat.ErrUnsupported) {
		err = fmt.Errorf("%w: statx gives no mount ID (Linux < 5.8)", ErrUnsupported)
	}
	return s, err
}

var kernelFeatures = sync.OnceValue(probeKernel)

var kernelStrategy = sync.OnceValue(func() strategy { return bestStrategy(kernelFeatures()) })

func autoStrategy() strategy { return kernelStrategy() }

// probeKernel asks the kernel about "/" once for each feature: each is
// found by using it, never inferred from another or from the release.
func probeKernel() KernelFeatures {
	unique, err := fsat.StatMount(unix.AT_FDCWD, "/", fsat.MountKey)
	_, classicErr := fsat.StatMount(unix.AT_FDCWD, "/", fsat.TableID)
	f := KernelFeatures{
		StatxMountIDUnique: err == nil && unique.UniqueID != 0,
		StatxMountID:       classicErr == nil,
	}
	var fd int
	fd, err = fsat.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_XDEV,
	})
	if err == nil {
		unix.Close(fd)
		f.Openat2 = true
	}
	return f
}

// bestStrategy is the best strategy the kernel features allow.
func bestStrategy(f KernelFeatures) strategy {
	switch {
	case f.StatxMountIDUnique:
		return strategyStatxUnique
	case f.StatxMountID:
		return strategyStatxMntID
	case f.Openat2:
		return strategyOpenat2
	}
	if _, err := os.Stat("/proc/self/mountinfo"); err == nil {
		return strategyMountinfo
	}
	return strategyStdev
}

// supportedStrategies lists the strategies this kernel can run, best first.
func supportedStrategies() []strategy {
	f := kernelFeatures()
	var out []strategy
	if f.StatxMountIDUnique {
		out = append(out, strategyStatxUnique)
	}
	if f.StatxMountID {
		out = append(out, strategyStatxMntID)
	}
	if f.Openat2 {
		out = append(out, strategyOpenat2)
	}
	if _, err := os.Stat("/proc/self/mountinfo"); err == nil {
		out = append(out, strategyMountinfo)
	}
	return append(out, strategyStdev)
}

// fdPath is the kernel's name for what fd refers to, with symlinks
// resolved. It is how a directory that was opened through a symlinked
// parent is found in the mount table.
func fdPath(fd int, fallback string) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err == nil && strings.HasPrefix(p, "/") {
		// The kernel appends " (deleted)" to unlinked files' names; a
		// name that really ends so is kept when the file still has links.
		if trimmed, ok := strings.CutSuffix(p, " (deleted)"); ok {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Nlink == 0 {
				return trimmed, nil
			}
		}
		return p, nil
	}
	// Without /proc, resolve the name instead; the answer can be stale if
	// the tree is changing, which only makes the mount listing less exact.
	real, err2 := filepath.EvalSymlinks(fallback)
	if err2 != nil {
		return "", errors.Join(err, err2)
	}
	return filepath.Abs(real)
}

// detect implements Detect; with a non-nil table the hugetlbfs page size
// comes from it instead of a fresh read of the mount table.
func detect(path string, tab *MountTable) (FSInfo, error) {
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_PATH, 0)
	if err != nil {
		return FSInfo{Path: path}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return detectFd(fd, path, tab)
}

// detectFd is detect for an open file; path names it in messages.
func detectFd(fd int, path string, tab *MountTable) (FSInfo, error) {
	return detectFdAs(fd, path, tab, nil)
}

// detectFdAs is detectFd; known, when not nil, is fd's mount as statx
// gave it, with mount IDs: it is not asked again.
func detectFdAs(fd int, path string, tab *MountTable, known *fsat.MountStat) (FSInfo, error) {
	info := FSInfo{Path: path}
	var err error
	var st unix.Statfs_t
	if err := fsat.Retry(func() error { return unix.Fstatfs(fd, &st) }); err != nil {
		return info, &os.PathError{Op: "fstatfs", Path: path, Err: err}
	}
	info.Magic = uint32(st.Type)
	info.FSType = FSTypeName(info.Magic)
	if known != nil {
		info.MountPoint, info.MountPointSure = known.Root, true
	} else if info.MountPoint, info.MountPointSure, err = fdIsMountRoot(fd, path); err != nil {
		return info, err
	}
	if info.Magic == MagicHugetlbfs {
		if tab, err = tab.OrRead(); err != nil {
			return info, err
		}
		size, err := tab.hugePageSizeOf(fd, path, known)
		if err != nil {
			return info, err
		}
		if size == 0 {
			size = int64(st.Bsize) // hugetlbfs reports the page size as its block size
		}
		info.HugePageSize = size
	}
	return info, nil
}

// fdIsMountRoot answers IsMountPoint for an open file.
func fdIsMountRoot(fd int, path string) (mounted, sure bool, err error) {
	if s, err := fsat.StatMount(fd, "", fsat.TableID); err == nil {
		return s.Root, true, nil
	}
	// No statx mount-root attribute: ask by name, which runs the rest of
	// the fallback chain.
	real, err := fdPath(fd, path)
	if err != nil {
		return false, false, err
	}
	return isMountPoint(real, strategyOpenat2)
}

// within reports whether path is dir or beneath it. Both must be clean.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

func isMountPoint(path string, s strategy) (mounted, sure bool, err error) {
	if path == "" {
		return false, false, &InvalidPathError{Path: path, Reason: "empty path"}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, false, err
	}
	// Split the path as given, not as filepath.Abs cleaned it: the kernel
	// resolves "link/.." to the parent of link's target, not to the
	// directory holding link, and follows a symlink written with a trailing
	// slash. Such last elements are answered about where the kernel says
	// the path leads.
	trimmed := strings.TrimRight(path, "/")
	if trimmed == "" {
		return true, true, nil // "/"
	}
	slash := strings.LastIndexByte(trimmed, '/')
	dir, base := trimmed[:slash+1], trimmed[slash+1:]
	if base == "." || base == ".." {
		return isMountPointResolved(path, s)
	}
	if dir == "" {
		dir = "."
	}
	pfd, err := fsat.Openat(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return false, false, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(pfd)

	var st unix.Stat_t
	if err := fsat.Retry(func() error { return unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return false, false, &os.PathError{Op: "fstatat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if len(trimmed) < len(path) {
			return isMountPointResolved(path, s) // "link/" names the target
		}
		// mount(2) follows symlinks, so a symlink is never a mount root.
		return false, true, nil
	}
	return childIsMountRoot(pfd, base, abs, &st, s)
}

// isMountPointResolved answers isMountPoint for the file path leads to,
// named by the kernel (a clean path without symlinks, so this recursion
// ends at once).
func isMountPointResolved(path string, s strategy) (mounted, sure bool, err error) {
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_PATH, 0)
	if err != nil {
		return false, false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	real, err := fdPath(fd, path)
	unix.Close(fd)
	if err != nil {
		return false, false, err
	}
	return isMountPoint(real, s)
}

// childIsMountRoot runs the fallback chain, starting at s, for the entry
// name in the directory pfd. st is its lstat.
func childIsMountRoot(pfd int, name, path string, st *unix.Stat_t, s strategy) (mounted, sure bool, err error) {
	switch s {
	case strategyStatxUnique, strategyStatxMntID:
		ms, err := fsat.StatMount(pfd, name, s.mountQuery())
		switch {
		case err == nil:
			return ms.Root, true, nil
		case !errors.Is(err, fsat.ErrUnsupported):
			return false, false, &os.PathError{Op: "statx", Path: path, Err: err}
		}
		fallthrough
	case strategyOpenat2:
		fd, err := fsat.Openat2(pfd, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_XDEV,
		})
		switch err {
		case nil:
			unix.Close(fd)
			return false, true, nil
		case unix.EXDEV:
			return true, true, nil
		case unix.ENOSYS, unix.EPERM, unix.EINVAL, unix.EAGAIN:
			// Not available (or blocked by seccomp): next strategy.
		default:
			return false, false, &os.PathError{Op: "openat2", Path: path, Err: err}
		}
		fallthrough
	case strategyMountinfo:
		real, err := fdPath(pfd, filepath.Dir(path))
		if err == nil {
			if t, err := readMountTable(); err == nil {
				return t.mountedOn(filepath.Join(real, name)), true, nil
			}
		}
		fallthrough
	default:
		var pst unix.Stat_t
		if err := unix.Fstat(pfd, &pst); err != nil {
			return false, false, &os.PathError{Op: "fstat", Path: filepath.Dir(path), Err: err}
		}
		if pst.Dev != st.Dev || pst.Ino == st.Ino {
			return true, true, nil
		}
		return false, false, nil
	}
}

func nestedMounts(path string) ([]Mount, error) {
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	_, nested, _, _, err := mountsAtAndBeneath(fd, path)
	return nested, err
}

// mountsAtAndBeneath reads the mount table once and returns
// MountsAtFile's answer for the directory fd, with the kernel's name for
// fd that in-tree mounts are named under, and the table.
func mountsAtAndBeneath(fd int, path string) (at, beneath []Mount, real string, t *MountTable, err error) {
	real, err = fdPath(fd, path)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	t, err = readMountTable()
	if err != nil {
		return nil, nil, "", nil, err
	}
	at, beneath = t.mountsAt(fd, pathOf(real), nil)
	return at, beneath, real, t, nil
}

// renameWithin renames the mount points at or beneath the directory from
// as the same places beneath to.
func renameWithin(ms []Mount, from, to string) {
	if from == to {
		return
	}
	for i := range ms {
		if rest, ok := cutDir(ms[i].MountPoint, from); ok {
			if rest == "" {
				ms[i].MountPoint = to
			} else {
				ms[i].MountPoint = strings.TrimRight(to, "/") + rest
			}
		}
	}
}

// cutDir returns what follows dir in path ("" or "/..."), when path is dir
// or beneath it. Both must be clean.
func cutDir(path, dir string) (rest string, ok bool) {
	if dir == "/" {
		if path == "/" {
			return "", true
		}
		return path, strings.HasPrefix(path, "/")
	}
	if rest, ok := strings.CutPrefix(path, dir); ok && (rest == "" || rest[0] == '/') {
		return rest, true
	}
	return "", false
}

func sortMounts(ms []Mount) {
	slices.SortStableFunc(ms, func(a, b Mount) int { return strings.Compare(a.MountPoint, b.MountPoint) })
}
