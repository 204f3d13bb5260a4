package cli

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// examinedDir is examineIn's answer about a volume directory of a plugin
// other than emptyDir, reached by descriptors: the volume directory is
// opened (O_PATH, no symlink followed) relative to its plugin directory,
// itself opened from the pods directory one component at a time without
// following symlinks (as ScanVolumes listed it), and every question is
// asked of that descriptor. A name is never resolved twice: a plugin or
// volume directory swapped for a symlink since the listing is an error or
// a symlink, never a way out of the kubelet root.
//
// Nothing is asked of a filesystem mounted on the volume directory but
// tmpfs and hugetlbfs (which never block): its type comes from the mount
// table, found by the descriptor's mount ID, and its mount-point status
// from statx with AT_STATX_DONT_SYNC. A hard NFS mount whose server is
// gone, or a CSI driver's FUSE daemon that hung, does not hang the scan.
type examinedDir struct {
	checkResult
	fd int // the volume directory (O_PATH), -1 when it is none
}

// close releases the descriptor.
func (e *examinedDir) close() {
	if e.fd >= 0 {
		unix.Close(e.fd)
		e.fd = -1
	}
}

// pluginDirs opens the plugin directories of a scan's volumes from the
// pods directory (fsat.SameMount: no symlink followed, no mount crossed)
// and keeps the last one open: ScanVolumes lists a plugin directory's
// volumes one after the other, and each is then examined relative to the
// same descriptor, the directory that was listed.
type pluginDirs struct {
	pods *fsat.Dir
	key  string
	dir  *fsat.Dir
	err  error
}

// open is the plugin directory escaped of the pod uid (owned by p).
func (p *pluginDirs) open(uid, escaped string) (*fsat.Dir, error) {
	key := uid + "/volumes/" + escaped
	if key == p.key {
		return p.dir, p.err
	}
	p.close()
	p.key = key
	p.dir, p.err = p.pods.OpenDir(key, fsat.SameMount)
	return p.dir, p.err
}

// close closes the directory kept open.
func (p *pluginDirs) close() {
	if p.dir != nil {
		p.dir.Close()
	}
	p.key, p.dir, p.err = "", nil, nil
}

// examinePluginVolume examines vd, a volume directory in one of dirs.
func examinePluginVolume(dirs *pluginDirs, tab *mountdetect.MountTable, vd volume.VolumeDir) examinedDir {
	e := examinedDir{fd: -1}
	e.Path, e.NestedMounts = vd.Path, []mountdetect.Mount{}
	escaped, err := volume.EscapePluginName(vd.Plugin)
	if err != nil {
		e.fail(err)
		return e
	}
	plDir, err := dirs.open(vd.PodUID, escaped)
	if errors.Is(err, fs.ErrNotExist) {
		e.SafeToRemove = true // gone since it was listed
		return e
	}
	if err != nil {
		e.fail(err)
		return e
	}
	e.checkResult, e.fd = examineAt(plDir.Fd(), vd.Volume, vd.Path, tab, true)
	return e
}

// child examines the entry name of the volume directory, relative to its
// descriptor.
func (e *examinedDir) child(tab *mountdetect.MountTable, name, path string) checkResult {
	if e.fd < 0 {
		r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}}
		return r.fail(errors.New("not a directory"))
	}
	r, _ := examineAt(e.fd, name, path, tab, false)
	return r
}

// examineAt is examineIn for the entry name of the directory dirfd (path
// names it in messages), with no symlink followed and nothing resolved by
// name but that one open. With keep, a directory's O_PATH descriptor is
// returned (else -1), for the caller to close.
func examineAt(dirfd int, name, path string, tab *mountdetect.MountTable, keep bool) (checkResult, int) {
	r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}}
	e, err := mountdetect.LookAt(dirfd, name, path, mountdetect.OpenPath)
	if errors.Is(err, fs.ErrNotExist) {
		r.SafeToRemove = true
		return r, -1
	}
	unsupported := errors.Is(err, mountdetect.ErrUnsupported) && e.Fd >= 0
	if err != nil && !unsupported {
		return r.fail(err), -1
	}
	fd := e.Fd
	ok := false
	defer func() {
		if !ok || !keep || r.kind != kindDir {
			e.Close()
		}
	}()
	r.Exists = true
	switch e.Mode {
	case unix.S_IFDIR:
		r.kind = kindDir
	case unix.S_IFLNK:
		r.kind = kindSymlink
		r.target = readlinkAt(dirfd, name)
	default:
		r.kind = kindFile
	}
	var m mountdetect.Mount
	inTable := false
	if e.Root {
		if m, inTable, err = tab.MountOf(e); err != nil {
			return r.fail(err), -1
		}
	}
	var info mountdetect.FSInfo
	if e.Root && (!inTable || m.FSType != "tmpfs" && m.FSType != "hugetlbfs") {
		// A mount of any other filesystem is not asked anything: its
		// type is the table's ("" when mounted since it was read).
		info = e.InfoFromTable(m)
	} else {
		// Not a mount root: on the directory's own filesystem (the
		// kubelet root's); or a tmpfs or hugetlbfs, which never block;
		// or, without statx mount IDs (Linux < 5.8), anything: Detect's
		// fallbacks, which ask the filesystem.
		if r.kind == kindSymlink {
			info, err = tab.DetectFile(dirfd, path) // a symlink's filesystem is its directory's
		} else {
			info, err = tab.DetectEntry(e)
		}
		if err != nil {
			return r.fail(fmt.Errorf("detect: %w", err)), -1
		}
		switch {
		case !unsupported:
			info.MountPoint, info.MountPointSure = e.Root, true
		case r.kind == kindSymlink:
			info.MountPoint, info.MountPointSure = false, true
		}
	}
	r.MountPoint, r.MountPointSure = info.MountPoint, info.MountPointSure
	r.FSType, r.Medium = info.FSType, emptydir.MediumOf(info)
	if info.HugePageSize > 0 {
		r.pageSize = info.HugePageSize
		r.HugePageSize = volume.FormatQuantity(info.HugePageSize)
	}
	if r.kind == kindDir {
		at, beneath, err := tab.MountsAtEntry(e)
		if err != nil {
			return r.fail(fmt.Errorf("list nested mounts: %w", err)), -1
		}
		r.on = at
		r.NestedMounts = append(r.NestedMounts, beneath...)
	}
	r.SafeToRemove = !r.MountPoint && r.MountPointSure && len(r.NestedMounts) == 0
	if r.kind == kindSymlink {
		r.SafeToRemove = !r.MountPoint && r.MountPointSure // rm unlinks it, never follows it
	}
	ok = true
	if keep && r.kind == kindDir {
		return r, fd
	}
	return r, -1
}

// readlinkAt is the target of the symlink name in dirfd, "" when it
// cannot be read (it is only shown).
func readlinkAt(dirfd int, name string) string {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil || n < 0 {
		return ""
	}
	return string(buf[:n])
}

// hasEntry reports whether the pod directory uid in pods has an entry
// name, or whether that cannot be told (it only skips work). Nothing is
// asked of a filesystem mounted on the entry (statx AT_STATX_DONT_SYNC):
// an lstat by path waited for good on one that stopped answering.
func hasEntry(pods *fsat.Dir, uid, name string) bool {
	pod, err := pods.OpenDir(uid, fsat.SameMount)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer pod.Close()
	_, err = pod.Lstat(name)
	return !errors.Is(err, fs.ErrNotExist)
}
