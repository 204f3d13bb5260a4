package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// examinedDir is examineIn's answer about a volume directory of a plugin
// other than emptyDir, reached by descriptors: the volume directory is
// looked at (statx, no symlink followed) relative to its plugin
// directory, itself opened from the pods directory one component at a
// time without following symlinks (as ScanVolumes listed it). A directory
// is answered from that statx, its plugin directory and the mount table
// (examineAt); anything else is opened O_PATH relative to the plugin
// directory and asked through that descriptor. A name is never resolved
// twice: a plugin or volume directory swapped for a symlink since the
// listing is an error or a symlink, never a way out of the kubelet root.
//
// Nothing is asked of a filesystem mounted on the volume directory but
// tmpfs and hugetlbfs (which never block): its type comes from the mount
// table, found by the descriptor's mount ID, and its mount-point status
// from statx with AT_STATX_DONT_SYNC. A hard NFS mount whose server is
// gone, or a CSI driver's FUSE daemon that hung, does not hang the scan.
type examinedDir struct {
	checkResult
	// dirfd is the plugin directory (pluginDirs holds it open while the
	// volume is examined), name the volume directory's entry in it and
	// looked what a statx of that name found (for child, which opens it).
	dirfd  int
	name   string
	looked fsat.MountStat
}

// close releases what the examination holds (nothing now: the volume
// directory is not kept open).
func (e *examinedDir) close() {}

// pluginDirs opens the plugin directories of a scan's volumes from the
// pods directory (fsat.SameMount: no symlink followed, no mount crossed)
// and keeps the last one open: ScanVolumes lists a plugin directory's
// volumes one after the other, and each is then examined relative to the
// same descriptor, the directory that was listed.
type pluginDirs struct {
	pods *fsat.Dir
	tab  *mountdetect.MountTable
	// key is the open directory's path from pods, uid and plugin the pod
	// and (unescaped) plugin it is of.
	key, uid, plugin string
	dir              *fsat.Dir
	err              error
	// pods is the pods directory as a mountdetect.Parent, read at the
	// first volume that needs it; parent is the open plugin directory's,
	// derived from it (the plugin directory is opened SameMount) and
	// held in beneath, which each plugin directory reuses.
	podsParent *mountdetect.Parent
	podsErr    error
	parent     *mountdetect.Parent
	beneath    mountdetect.Parent
}

// open is the directory of plugin (unescaped) of the pod uid (owned by
// p): the one open already when it is that pod's and plugin's.
func (p *pluginDirs) open(uid, plugin string) (*fsat.Dir, error) {
	if p.key != "" && uid == p.uid && plugin == p.plugin {
		return p.dir, p.err
	}
	p.close()
	escaped, err := volume.EscapePluginName(plugin)
	if err != nil {
		return nil, err
	}
	p.key, p.uid, p.plugin = uid+"/volumes/"+escaped, uid, plugin
	p.dir, p.err = p.pods.OpenDir(p.key, fsat.SameMount)
	return p.dir, p.err
}

// parentOf is the open plugin directory as a mountdetect.Parent, nil when
// it cannot be read (its volumes are then opened one by one).
func (p *pluginDirs) parentOf() *mountdetect.Parent {
	if p.parent != nil || p.dir == nil {
		return p.parent
	}
	if p.podsParent == nil && p.podsErr == nil {
		p.podsParent, p.podsErr = p.tab.Parent(p.pods.Fd(), p.pods.Path())
	}
	if p.podsParent != nil {
		p.beneath = p.podsParent.Beneath(p.key)
		p.parent = &p.beneath
	}
	return p.parent
}

// listed makes the plugin directory pd that ScanVolumes holds open the
// one examined: it is not opened again, nor closed here (borrowed:
// volume.WithPluginDir).
func (p *pluginDirs) listed(pd volume.PluginDir) {
	p.close()
	p.key, p.dir = pd.Rel, p.pods.Borrow(pd.Fd, pd.Path)
	if len(pd.Volumes) > 0 {
		p.uid, p.plugin = pd.Volumes[0].PodUID, pd.Volumes[0].Plugin
	}
}

// close closes the directory kept open (forgets one listed).
func (p *pluginDirs) close() {
	p.dir.Close()
	p.key, p.uid, p.plugin, p.dir, p.err = "", "", "", nil, nil
	p.parent = nil
}

// examinePluginVolume examines vd, a volume directory in one of dirs.
func examinePluginVolume(dirs *pluginDirs, tab *mountdetect.MountTable, vd volume.VolumeDir) examinedDir {
	e := examinedDir{dirfd: -1, name: vd.Volume}
	e.Path, e.NestedMounts = vd.Path, []mountdetect.Mount{}
	plDir, err := dirs.open(vd.PodUID, vd.Plugin)
	if errors.Is(err, fs.ErrNotExist) {
		e.SafeToRemove = true // gone since it was listed
		return e
	}
	if err != nil {
		e.fail(err)
		return e
	}
	e.dirfd = plDir.Fd()
	e.checkResult, e.looked = examineAt(plDir.Fd(), vd.Volume, vd.Path, tab, dirs.parentOf)
	return e
}

// child examines the entry name of the volume directory, which it opens
// (O_PATH, no symlink followed) relative to the plugin directory and
// checks to be the directory examined: it is asked only of a volume
// directory that is not a mount root (a CSI volume's), whose descriptor
// holds no mount.
func (e *examinedDir) child(tab *mountdetect.MountTable, name, path string) checkResult {
	r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}}
	if e.dirfd < 0 || e.kind != kindDir {
		return r.fail(errors.New("not a directory"))
	}
	fd, err := fsat.Openat(e.dirfd, e.name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return r.fail(&fs.PathError{Op: "openat", Path: e.Path, Err: err})
	}
	defer unix.Close(fd)
	now, err := fsat.StatMount(fd, "", fsat.MountKey|fsat.TableID)
	if err != nil {
		return r.fail(&fs.PathError{Op: "statx", Path: e.Path, Err: err})
	}
	if now.Dev != e.looked.Dev || now.Ino != e.looked.Ino || now.ID != e.looked.ID || now.Root != e.looked.Root {
		return r.fail(&fs.PathError{Op: "openat", Path: e.Path, Err: errors.New("changed while examined")})
	}
	r, _ = examineAt(fd, name, path, tab, nil)
	return r
}

// examineAt is examineIn for the entry name of the directory dirfd (path
// names it in messages), with no symlink followed and nothing resolved by
// name but once. It also returns what the statx of the entry found.
//
// The entry is looked at first by a statx of its name (AT_SYMLINK_NOFOLLOW,
// the mount ID the table lists: mountdetect.LookTableID), and a directory is not opened when that and the mount table
// answer everything: a mount root listed in the table (another plugin's
// volume, mounted; onMountRoot), or, with parent (the directory dirfd as
// a mountdetect.Parent; nil: none), a directory on the parent's mount. In
// an agent's mount namespace a volume's mount is a propagated copy of the
// kubelet's, and while any descriptor is open on its root the kubelet's
// umount2 of the original fails with EBUSY.
func examineAt(dirfd int, name, path string, tab *mountdetect.MountTable, parent func() *mountdetect.Parent) (checkResult, fsat.MountStat) {
	r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}}
	look, err := mountdetect.LookAt(dirfd, name, path, mountdetect.LookTableID)
	if errors.Is(err, fs.ErrNotExist) {
		r.SafeToRemove = true
		return r, look.MountStat
	}
	if err == nil && look.Mode == unix.S_IFDIR {
		if look.Root {
			if done, err := r.onMountRoot(tab, look, name); err != nil || done {
				if err != nil {
					return r.fail(err), look.MountStat
				}
				return r, look.MountStat
			}
		} else if p := optParent(parent); p != nil {
			info, at, beneath, ok, err := tab.Child(p, look, name)
			if err != nil {
				return r.fail(fmt.Errorf("list nested mounts: %w", err)), look.MountStat
			}
			if ok {
				r.Exists, r.kind = true, kindDir
				r.MountPoint, r.MountPointSure = false, true
				r.FSType, r.Medium = info.FSType, emptydir.MediumOf(info)
				r.on = at
				r.NestedMounts = append(r.NestedMounts, beneath...)
				r.SafeToRemove = len(r.NestedMounts) == 0
				return r, look.MountStat
			}
		}
	}
	// Anything else is opened O_PATH and asked through that descriptor
	// alone (what it is now: the statx only chose to open it, and nothing
	// it saw is mixed into the answer): a symlink, a file; a
	// mount root missing from the table (mounted since it was read) or a
	// hugetlbfs (its page size); a directory without a parent or not on
	// its mount; anything on a kernel without statx mount IDs.
	r, st := examineOpen(dirfd, name, path, tab)
	return r, st
}

// optParent calls parent if there is one.
func optParent(parent func() *mountdetect.Parent) *mountdetect.Parent {
	if parent == nil {
		return nil
	}
	return parent()
}

// examineOpen is examineAt through an O_PATH descriptor of the entry,
// closed before it returns.
func examineOpen(dirfd int, name, path string, tab *mountdetect.MountTable) (checkResult, fsat.MountStat) {
	r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}}
	e, err := mountdetect.LookAt(dirfd, name, path, mountdetect.OpenPath)
	if errors.Is(err, fs.ErrNotExist) {
		r.SafeToRemove = true
		return r, e.MountStat
	}
	unsupported := errors.Is(err, mountdetect.ErrUnsupported) && e.Fd >= 0
	if err != nil && !unsupported {
		return r.fail(err), e.MountStat
	}
	defer e.Close()
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
			return r.fail(err), e.MountStat
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
			return r.fail(fmt.Errorf("detect: %w", err)), e.MountStat
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
			return r.fail(fmt.Errorf("list nested mounts: %w", err)), e.MountStat
		}
		r.on = at
		r.NestedMounts = append(r.NestedMounts, beneath...)
	}
	r.SafeToRemove = !r.MountPoint && r.MountPointSure && len(r.NestedMounts) == 0
	if r.kind == kindSymlink {
		r.SafeToRemove = !r.MountPoint && r.MountPointSure // rm unlinks it, never follows it
	}
	return r, e.MountStat
}

// onMountRoot answers for look, the entry name that a statx found to be a
// directory with a mount on it, from the table alone, without opening it:
// its mount (found by the mount ID) gives the type, the mounts stacked on
// the directory and those beneath it (by the table's mount point of that
// mount, the path the kernel would give for a descriptor of it). done is
// false when the table cannot answer (the mount is not in it, or is a
// hugetlbfs, whose page size is asked of it; or the table names its mount
// point otherwise than name, moved since it was read): the caller then
// opens the entry.
func (r *checkResult) onMountRoot(tab *mountdetect.MountTable, look mountdetect.Entry, name string) (done bool, err error) {
	m, inTable, err := tab.MountOf(look)
	if err != nil || !inTable || m.FSType == "hugetlbfs" || filepath.Base(m.MountPoint) != name {
		return false, err
	}
	at, beneath, ok, err := tab.MountsOnRoot(look)
	if err != nil || !ok {
		return false, err
	}
	info := look.InfoFromTable(m)
	r.Exists, r.kind = true, kindDir
	r.MountPoint, r.MountPointSure = true, true
	r.FSType, r.Medium = info.FSType, emptydir.MediumOf(info)
	r.on = at
	r.NestedMounts = append(r.NestedMounts, beneath...)
	r.SafeToRemove = false // a mount point
	return true, nil
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
// name, or whether that cannot be told (it only skips work): hasEntryIn
// of the pod directory opened.
func hasEntry(pods *fsat.Dir, uid, name string) bool {
	pod, err := pods.OpenDir(uid, fsat.SameMount)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer pod.Close()
	return hasEntryIn(pod.Fd(), name)
}

// hasEntryIn reports whether the directory open as fd has an entry name,
// or whether that cannot be told. Nothing is asked of a filesystem
// mounted on the entry (statx AT_STATX_DONT_SYNC): an lstat by path
// waited for good on one that stopped answering.
func hasEntryIn(fd int, name string) bool {
	_, err := fsat.StatAt(fd, name, unix.AT_SYMLINK_NOFOLLOW)
	return err != unix.ENOENT
}
