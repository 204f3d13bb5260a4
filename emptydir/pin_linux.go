package emptydir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// The volume's own mount is unmounted by name: umount2 has no form that
// takes a mount ID, through the mount root's descriptor it always fails
// with EBUSY (the descriptor holds the mount), and moving the mount away
// by that descriptor first (move_mount) is refused under a shared parent,
// which a kubelet root usually is. So the name is bound instead: the
// directory the mount is on — beneath it, on the kubelet root's
// filesystem — is made immutable (FS_IMMUTABLE_FL) while it is unmounted.
// The kernel refuses to rename, exchange, replace or remove an immutable
// directory, whoever asks (EPERM); only a process with CAP_LINUX_IMMUTABLE
// can clear the flag. Once the volume's name is seen naming the pinned
// directory (after every rename the kernel let through before the flag
// was set is over), it names that directory until the pin goes: the last
// statx, umount2 and the check after it reach the mount on that
// directory, whatever a renamer in another mount namespace does.

// fsImmutableFL is FS_IMMUTABLE_FL (linux/fs.h); x/sys does not have it.
const fsImmutableFL = 0x10

// errCannotPin is wrapped by pinMountpoint's error when the directory
// cannot be pinned here: the kubelet root's filesystem has no immutable
// attribute (ramfs, NFS, most FUSE filesystems), this process lacks
// CAP_LINUX_IMMUTABLE, or the volumes directory's mount cannot be cloned
// (it is unbindable).
var errCannotPin = errors.New("the volume directory cannot be made immutable here")

// errPinnedOther is wrapped by pinMountpoint's error when the directory it
// pinned is not, or no longer, the one the volume's name names, or not the
// one SetUp mounted on. Nothing stays pinned then.
var errPinnedOther = errors.New("the volume directory changed while it was being pinned")

// pin is the volume directory beneath the volume's mount, held immutable.
type pin struct {
	dir *fsat.Dir // opened through a clone of the volumes directory's mount
	set bool      // this pin set the flag (else a teardown that stopped left it)
}

// pinMountpoint pins the directory the volume's name names. It is opened
// through a detached clone of the volumes directory's mount, made without
// the mounts on it (open_tree OPEN_TREE_CLONE, not recursive), so that the
// volume's mount is not entered, and as a directory on that clone and not
// a mount root (fsat.SameMount): it is on the kubelet root's filesystem,
// never on anything mounted. Once pinned, the name must still name it (it
// may have been exchanged between the open and the ioctl) and, when the
// record says which directory SetUp mounted on, be that one.
func (v *podVolume) pinMountpoint(rec *mountRecord) (*pin, error) {
	cfd, err := unix.OpenTree(v.vols.Fd(), "", unix.OPEN_TREE_CLONE|unix.O_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		// EINVAL (an unbindable mount), EPERM, ENOSYS: a clone is not
		// to be had here.
		return nil, fmt.Errorf("%w: %w", errCannotPin, &os.PathError{Op: "open_tree", Path: v.vols.Path(), Err: err})
	}
	clone := fsat.FromFd(cfd, v.vols.Path())
	defer clone.Close()
	dir, err := clone.OpenDir(v.name, fsat.SameMount)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errPinnedOther, err)
	}
	flags, err := getFlags(dir.Fd(), v.dir)
	if err != nil {
		dir.Close()
		return nil, cannotPin(err)
	}
	p := &pin{dir: dir}
	if flags&fsImmutableFL == 0 {
		if err := setFlags(dir.Fd(), v.dir, flags|fsImmutableFL); err != nil {
			dir.Close()
			return nil, cannotPin(err)
		}
		p.set = true
	}
	// A rename that the kernel let through before the flag was set may
	// still be under way: vfs_rename checks the flag (may_delete) before
	// it locks the directories renamed and moves the names, all under the
	// lock of the parent directory, taken before the check. Take that
	// lock once — a rename of the volume's name onto itself that may not
	// replace anything fails with EEXIST under it, having changed
	// nothing — and every such rename is over; any later one sees the
	// flag. (Without this, TestTearDownRenamerRace sees the NAS
	// unmounted in a few percent of the teardowns in which the renamer
	// tries in the window.)
	err = fsat.Retry(func() error {
		return unix.Renameat2(clone.Fd(), v.name, clone.Fd(), v.name, unix.RENAME_NOREPLACE)
	})
	switch err {
	case unix.EEXIST:
	case unix.ENOENT:
		return nil, p.undoWith(fmt.Errorf("%w: %s is gone", errPinnedOther, v.dir))
	default:
		return nil, p.undoWith(&os.PathError{Op: "renameat2 RENAME_NOREPLACE (a barrier, which changes nothing)", Path: v.dir, Err: err})
	}
	var held unix.Stat_t
	if err := unix.Fstat(dir.Fd(), &held); err != nil {
		return nil, p.undoWith(&os.PathError{Op: "fstat", Path: v.dir, Err: err})
	}
	named, err := clone.Lstat(v.name)
	switch {
	case err != nil:
		return nil, p.undoWith(fmt.Errorf("%w: %w", errPinnedOther, err))
	case named.Dev != held.Dev || named.Ino != held.Ino:
		return nil, p.undoWith(fmt.Errorf("%w: %s names another directory now", errPinnedOther, v.dir))
	case rec.DirIno != 0 && (held.Dev != rec.DirDev || held.Ino != rec.DirIno):
		return nil, p.undoWith(fmt.Errorf("%w: %s is not the directory SetUp mounted on (device %d, inode %d)", errPinnedOther, v.dir, rec.DirDev, rec.DirIno))
	}
	return p, nil
}

// cannotPin wraps errCannotPin around an ioctl error that says the flag
// is not to be had here: no such attribute on the filesystem (ENOTTY,
// EOPNOTSUPP, EINVAL), no CAP_LINUX_IMMUTABLE (EPERM), a read-only
// filesystem (EROFS). Other errors stay errors.
func cannotPin(err error) error {
	for _, e := range []error{unix.ENOTTY, unix.EOPNOTSUPP, unix.EINVAL, unix.EPERM, unix.EROFS, unix.ENOSYS} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", errCannotPin, err)
		}
	}
	return err
}

// undo clears the flag if this pin set it, and lets the directory go.
func (p *pin) undo() error {
	defer p.dir.Close()
	if !p.set {
		return nil
	}
	return clearImmutable(p.dir.Fd(), p.dir.Path())
}

// undoWith is undo for a failure err: both errors are returned.
func (p *pin) undoWith(err error) error {
	if uerr := p.undo(); uerr != nil {
		return errors.Join(err, uerr)
	}
	return err
}

// release clears the flag, whoever set it (the directory is removed next:
// a flag a teardown that stopped left goes too), and lets the directory
// go.
func (p *pin) release() error {
	defer p.dir.Close()
	return clearImmutable(p.dir.Fd(), p.dir.Path())
}

// unpinLeftover clears the immutable flag that a teardown stopped between
// its unmount and its end left on the volume directory, which is about to
// be removed: the directory the plan found and holds open as e (path names
// it). Only a process with CAP_LINUX_IMMUTABLE can set the flag, and no
// directory carrying it can be renamed into the volume's place: an
// immutable directory under the volume's name was made so there. Anything
// but a directory that is not a mount root is left to the removal, which
// refuses mounts; so is a filesystem without the attribute, where nothing
// can have been pinned.
func unpinLeftover(e entry, path string) error {
	if e.kind != entryDir || e.Root {
		return nil
	}
	if _, err := getFlags(e.Fd, path); err != nil {
		return nil
	}
	return clearImmutable(e.Fd, path)
}

// clearImmutable clears FS_IMMUTABLE_FL on the directory fd (path names
// it) if it is set.
func clearImmutable(fd int, path string) error {
	flags, err := getFlags(fd, path)
	if err != nil || flags&fsImmutableFL == 0 {
		return err
	}
	return setFlags(fd, path, flags&^fsImmutableFL)
}

// getFlags returns the inode flags of fd (FS_IOC_GETFLAGS); path names it.
func getFlags(fd int, path string) (uint32, error) {
	var flags uint32
	err := fsat.Retry(func() (err error) {
		flags, err = unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		return err
	})
	if err != nil {
		return 0, &os.PathError{Op: "ioctl FS_IOC_GETFLAGS", Path: path, Err: err}
	}
	return flags, nil
}

// setFlags sets the inode flags of fd (FS_IOC_SETFLAGS); path names it.
func setFlags(fd int, path string, flags uint32) error {
	err := fsat.Retry(func() error { return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags)) })
	if err != nil {
		return &os.PathError{Op: "ioctl FS_IOC_SETFLAGS", Path: path, Err: err}
	}
	return nil
}
