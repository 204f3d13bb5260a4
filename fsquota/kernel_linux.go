package fsquota

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
)

// Statfs magic numbers of the filesystems with project quotas.
const (
	magicXFS  uint32 = 0x58465342
	magicExt4 uint32 = 0xef53
)

var (
	reqFsgetxattr = uintptr(fsIocFsgetxattr(runtime.GOARCH))
	reqFssetxattr = uintptr(fsIocFssetxattr(runtime.GOARCH))
	reqGetversion = uintptr(fsIocGetversion(runtime.GOARCH))
)

// generation reads the inode generation of an open file.
func generation(fd int) (uint32, error) {
	var gen uint32 // the kernel writes an int, whatever the request's size
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), reqGetversion, uintptr(unsafe.Pointer(&gen)))
	if e != 0 {
		return 0, e
	}
	return gen, nil
}

// getFsxattr reads struct fsxattr of an open file.
func getFsxattr(fd int) (fsxattr, error) {
	var x fsxattr
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), reqFsgetxattr, uintptr(unsafe.Pointer(&x)))
	if e != 0 {
		return x, e
	}
	return x, nil
}

// setFsxattr writes struct fsxattr of an open file.
func setFsxattr(fd int, x *fsxattr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), reqFssetxattr, uintptr(unsafe.Pointer(x)))
	if e != 0 {
		return e
	}
	return nil
}

// setFdProjectID sets the project ID of an open file; a directory also gets
// FS_XFLAG_PROJINHERIT (or loses it with id 0). It does nothing when both
// are already so.
func setFdProjectID(fd int, isDir bool, id uint32) error {
	x, err := getFsxattr(fd)
	if err != nil {
		return err
	}
	flags := x.Xflags
	if isDir {
		if id != 0 {
			flags |= fsXflagProjinherit
		} else {
			flags &^= fsXflagProjinherit
		}
	}
	if x.Projid == id && x.Xflags == flags {
		return nil
	}
	x.Projid, x.Xflags = id, flags
	return setFsxattr(fd, &x)
}

func openNoFollow(path string, flags int) (int, error) {
	var fd int
	err := fsat.Retry(func() (err error) {
		fd, err = unix.Open(path, flags|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		return err
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

func projectID(path string) (uint32, error) {
	fd, err := openNoFollow(path, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	x, err := getFsxattr(fd)
	if err != nil {
		return 0, fsxattrErr(path, "FS_IOC_FSGETXATTR", err)
	}
	return x.Projid, nil
}

func setProjectID(path string, id uint32) error {
	fd, err := openNoFollow(path, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if err := setFdProjectID(fd, st.Mode&unix.S_IFMT == unix.S_IFDIR, id); err != nil {
		return setFsxattrErr(fd, path, err)
	}
	return nil
}

// setFsxattrErr is fsxattrErr for a failed FS_IOC_FSSETXATTR on fd: ext4
// refuses a project ID with EOPNOTSUPP when it was made without the project
// feature, which deserves a reason that says so.
func setFsxattrErr(fd int, path string, err error) error {
	var sfs unix.Statfs_t
	if err == unix.EOPNOTSUPP && unix.Fstatfs(fd, &sfs) == nil && uint32(sfs.Type) == magicExt4 {
		return &UnsupportedError{Path: path, Reason: "ext4 without the project feature has no project IDs (" + ext4Features + ")", Err: err}
	}
	return fsxattrErr(path, "FS_IOC_FSSETXATTR", err)
}

// ext4Features says how to give ext4 project quotas.
const ext4Features = "make it with mkfs.ext4 -O quota,project -E quotatype=prjquota, or run tune2fs -O project,quota -Q prjquota on it unmounted"

// fsxattrErr wraps an fsxattr ioctl failure; "not implemented here" errnos
// become an *UnsupportedError.
func fsxattrErr(path, op string, err error) error {
	switch err {
	case unix.ENOTTY, unix.EOPNOTSUPP, unix.ENOSYS:
		return &UnsupportedError{Path: path, Reason: "the filesystem has no project IDs (" + op + ")", Err: err}
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

// fsRef is an open directory and what the quota calls need to know about
// its filesystem.
type fsRef struct {
	fd    int
	owned bool // fd was opened for r (and is closed with it)
	path  string
	magic uint32
	dev   uint64
	ino   uint64
	gen   uint32 // inode generation, 0 when the filesystem keeps none
	mode  uint32
	key   mountKey
}

// mountKey names a mount for the support cache. With STATX_MNT_ID_UNIQUE
// (Linux 6.8+) IDs are never reused, so a remount (with other options) is
// always a new key; older kernels reuse IDs, hence the device number too.
type mountKey struct {
	dev    uint64
	mntID  uint64
	unique bool
}

// quotaState is what the kernel says about a filesystem's project quotas.
type quotaState struct {
	accounting bool
	enforcing  bool
}

// dquot is one project's quota record.
type dquot struct {
	bytes, inodes      int64
	hardBytes, softBlk int64
	hardInodes         int64
}

func (d dquot) unused() bool {
	return d.bytes == 0 && d.inodes == 0 && d.hardBytes == 0 && d.softBlk == 0 && d.hardInodes == 0
}

// quotaBackend is the quotactl half of the kernel, a seam so that tests on
// a kernel without quotas can still drive Manager through real fsxattr
// ioctls. New installs kernelQuota.
type quotaBackend interface {
	state(r *fsRef) (quotaState, error)
	get(r *fsRef, id uint32) (dquot, error)
	setLimit(r *fsRef, id uint32, hardBytes int64) error
}

// kernelQuota calls quotactl_fd (Linux 5.14+) and falls back to quotactl on
// the filesystem's block device when the kernel has no quotactl_fd.
type kernelQuota struct {
	generic bool // use Q_GETQUOTA/Q_SETQUOTA on xfs too (tests)

	noFD    atomic.Bool
	devMu   sync.Mutex
	devPath map[uint64]string
}

func (k *kernelQuota) xfsIface(r *fsRef) bool { return r.magic == magicXFS && !k.generic }

// quotactl runs one quotactl command for r's filesystem.
func (k *kernelQuota) quotactl(r *fsRef, cmd uint32, id uint32, addr unsafe.Pointer) error {
	if !k.noFD.Load() {
		err := fsat.Retry(func() error {
			_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, uintptr(r.fd), uintptr(cmd), uintptr(id), uintptr(addr), 0, 0)
			if e != 0 {
				return e
			}
			return nil
		})
		// ENOSYS from quotactl_fd also means "this filesystem has no such
		// quota operation" (ext4 without the quota feature has no
		// Q_XGETQSTATV): only a kernel without the syscall switches to the
		// block device, or every later call would take the fallback.
		if err != unix.ENOSYS || haveQuotactlFD() {
			return err
		}
		k.noFD.Store(true)
	}
	dev, err := k.blockDevice(r)
	if err != nil {
		return err
	}
	special, err := unix.BytePtrFromString(dev)
	if err != nil {
		return err
	}
	return fsat.Retry(func() error {
		_, _, e := unix.Syscall6(unix.SYS_QUOTACTL, uintptr(cmd), uintptr(unsafe.Pointer(special)), uintptr(id), uintptr(addr), 0, 0)
		if e != 0 {
			return e
		}
		return nil
	})
}

// haveQuotactlFD reports whether the kernel has the quotactl_fd syscall:
// called on an invalid descriptor it fails with EBADF, a kernel without it
// says ENOSYS.
var haveQuotactlFD = sync.OnceValue(func() bool {
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, ^uintptr(0), 0, 0, 0, 0, 0)
	return e != unix.ENOSYS
})

// blockDevice finds the block device of r's filesystem in the mount table
// (the source of the mount r is on, by its mount ID) and checks that it is
// one: quotactl(2) names filesystems by device.
func (k *kernelQuota) blockDevice(r *fsRef) (string, error) {
	k.devMu.Lock()
	defer k.devMu.Unlock()
	if p, ok := k.devPath[r.dev]; ok {
		return p, nil
	}
	e, err := mountdetect.LookAt(r.fd, "", r.path, mountdetect.LookOnly)
	if err != nil {
		// No mount IDs (Linux < 5.8): any mount of the device has its
		// source.
		e = mountdetect.Entry{Path: r.path, MountStat: fsat.MountStat{Dev: r.dev}}
	}
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		return "", fmt.Errorf("find the block device of %s: %w", r.path, err)
	}
	m, ok, _ := tab.MountOf(e)
	var st unix.Stat_t
	if ok && unix.Stat(m.Source, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK && uint64(st.Rdev) == r.dev {
		if k.devPath == nil {
			k.devPath = map[uint64]string{}
		}
		k.devPath[r.dev] = m.Source
		return m.Source, nil
	}
	return "", fmt.Errorf("no block device node for %d:%d (the filesystem of %s): %w", unix.Major(r.dev), unix.Minor(r.dev), r.path, unix.ENODEV)
}

func (k *kernelQuota) state(r *fsRef) (quotaState, error) {
	sv := fsQuotaStatv{Version: fsQstatvVersion1}
	err := k.quotactl(r, cmdXGetQStatV, 0, unsafe.Pointer(&sv))
	if err == nil {
		return quotaState{accounting: sv.Flags&fsQuotaPdqAcct != 0, enforcing: sv.Flags&fsQuotaPdqEnfd != 0}, nil
	}
	if err != unix.EINVAL && err != unix.EOPNOTSUPP && err != unix.ENOSYS {
		return quotaState{}, fmt.Errorf("quotactl Q_XGETQSTATV: %w", err)
	}
	// No Q_XGETQSTATV for this filesystem (ext4 without the quota feature
	// answers ENOSYS, not only a kernel without quotactl): Q_GETINFO
	// succeeds only while project quotas are on (ESRCH otherwise, ENOSYS
	// when the filesystem has no quota support at all); assume they are
	// enforced.
	var info ifDqinfo
	if err := k.quotactl(r, cmdGetInfo, 0, unsafe.Pointer(&info)); err != nil {
		return quotaState{}, fmt.Errorf("quotactl Q_GETINFO: %w", err)
	}
	return quotaState{accounting: true, enforcing: true}, nil
}

func (k *kernelQuota) get(r *fsRef, id uint32) (dquot, error) {
	if k.xfsIface(r) {
		var d fsDiskQuota
		err := k.quotactl(r, cmdXGetQuota, id, unsafe.Pointer(&d))
		if err == unix.ENOENT {
			return dquot{}, nil // no dquot: nothing charged, no limits
		}
		if err != nil {
			return dquot{}, fmt.Errorf("quotactl Q_XGETQUOTA: %w", err)
		}
		return dquot{
			bytes:      int64(d.Bcount) * bbSize,
			inodes:     int64(d.Icount),
			hardBytes:  int64(d.BlkHardlimit) * bbSize,
			softBlk:    int64(d.BlkSoftlimit),
			hardInodes: int64(d.InoHardlimit) + int64(d.InoSoftlimit),
		}, nil
	}
	var d ifDqblk
	err := k.quotactl(r, cmdGetQuota, id, unsafe.Pointer(&d))
	if err == unix.ENOENT {
		return dquot{}, nil
	}
	if err != nil {
		return dquot{}, fmt.Errorf("quotactl Q_GETQUOTA: %w", err)
	}
	return dquot{
		bytes:      int64(d.Curspace),
		inodes:     int64(d.Curinodes),
		hardBytes:  int64(d.Bhardlimit) * qifBlockSize,
		softBlk:    int64(d.Bsoftlimit),
		hardInodes: int64(d.Ihardlimit) + int64(d.Isoftlimit),
	}, nil
}

func (k *kernelQuota) setLimit(r *fsRef, id uint32, hardBytes int64) error {
	if k.xfsIface(r) {
		d := fsDiskQuota{
			Version:      fsDquotVersion,
			Flags:        fsProjQuota,
			Fieldmask:    fsDqBsoft | fsDqBhard,
			ID:           id,
			BlkHardlimit: roundUp(hardBytes, bbSize),
		}
		if err := k.quotactl(r, cmdXSetQLim, id, unsafe.Pointer(&d)); err != nil {
			return fmt.Errorf("quotactl Q_XSETQLIM: %w", err)
		}
		return nil
	}
	d := ifDqblk{Bhardlimit: roundUp(hardBytes, qifBlockSize), Valid: qifBlimits}
	if err := k.quotactl(r, cmdSetQuota, id, unsafe.Pointer(&d)); err != nil {
		return fmt.Errorf("quotactl Q_SETQUOTA: %w", err)
	}
	return nil
}

// unsupportedReason says why a quotactl errno means "no project quotas
// here", or "" when it means something else (a real failure).
func unsupportedReason(err error) string {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return ""
	}
	switch errno {
	case unix.ENOSYS:
		return "no quotactl for this filesystem (the kernel lacks CONFIG_QUOTACTL or the filesystem's quota support, such as CONFIG_XFS_QUOTA)"
	case unix.ESRCH:
		return "project quota accounting is off (mount the filesystem with prjquota)"
	case unix.ENODEV, unix.ENOTBLK:
		return "no block device to address the filesystem with quotactl"
	case unix.EINVAL, unix.EOPNOTSUPP:
		return "the filesystem does not implement project quotas"
	}
	return ""
}
