package mountdetect

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/fsat"
)

// PropagationOf reports the propagation of the mount that holds path in
// this process's mount namespace: whether a mount made later under the
// same directory in another namespace (the host's) appears here. A node
// agent in a container whose view of the kubelet root is a hostPath asks
// it of that root: when [CheckMountNamespace] says the container is not
// in the host's mount namespace, a root that [Propagation.Receives] still
// sees every mount the host makes under it (the mounts that exist when
// the container starts are copied into its namespace either way).
//
// path is resolved like any path given by the caller (symlinks followed).
// The mount is found by the ID statx reports for it; on Linux 6.8 and
// later statmount(2) answers for that one mount, without reading the
// mount table; before, its line in /proc/thread-self/mountinfo does
// (statx's STATX_MNT_ID: Linux 5.8). The answer is about the moment of
// the call.
func PropagationOf(path string) (Propagation, error) {
	// Opened once (symlinks followed), so that both IDs are of one file.
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_PATH, 0)
	if err != nil {
		return Propagation{}, fmt.Errorf("propagation of %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	s, err := statMount(fd, "", fsat.MountKey)
	if err != nil {
		return Propagation{}, fmt.Errorf("propagation of %s: statx: %w", path, err)
	}
	if s.UniqueID != 0 {
		p, err := statmountPropagation(s.UniqueID)
		if err == nil || !errors.Is(err, ErrUnsupported) {
			if err != nil {
				err = fmt.Errorf("propagation of %s: %w", path, err)
			}
			return p, err
		}
		if s, err = statMount(fd, "", fsat.TableID); err != nil {
			return Propagation{}, fmt.Errorf("propagation of %s: statx: %w", path, err)
		}
	}
	id := int(s.ID)
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) { return i.ID != id, i.ID == id })
	if err != nil {
		return Propagation{}, fmt.Errorf("propagation of %s: %w", path, err)
	}
	if len(infos) != 1 {
		// Unmounted between the two calls.
		return Propagation{}, fmt.Errorf("propagation of %s: mount %d is not in the mount table", path, id)
	}
	p, err := parsePropagation(infos[0].Optional)
	if err != nil {
		return Propagation{}, fmt.Errorf("propagation of %s: %w", path, err)
	}
	p.MountPoint, p.ID = infos[0].Mountpoint, id
	return p, nil
}

// struct statmount (include/uapi/linux/mount.h): the offsets of the
// fields read, the request flags, and MS_* propagation bits.
const (
	smMask           = 8
	smMntIDOld       = 56
	smMntPropagation = 72
	smMntPeerGroup   = 80
	smMntMaster      = 88
	smMntPoint       = 108
	smStr            = 512 // offsetof(struct statmount, str)

	statmountMntBasic = 0x2  // STATMOUNT_MNT_BASIC
	statmountMntPoint = 0x10 // STATMOUNT_MNT_POINT
)

// statmountPropagation asks statmount(2) about the mount with the unique
// ID id. ErrUnsupported: the kernel has no statmount.
func statmountPropagation(id uint64) (Propagation, error) {
	// struct mnt_id_req, version 0: size, spare, mnt_id, param.
	req := [3]uint64{unix.MNT_ID_REQ_SIZE_VER0, id, statmountMntBasic | statmountMntPoint}
	buf := make([]byte, smStr+unix.PathMax)
	for {
		_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req[0])),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
		switch {
		case errno == 0:
		case errno == unix.EINTR:
			continue
		case errno == unix.EOVERFLOW && len(buf) < 1<<20:
			// A mount point longer than PATH_MAX (the kernel escapes
			// nothing here, but a deep tree can exceed it).
			buf = make([]byte, 2*len(buf))
			continue
		case errno == unix.ENOSYS:
			return Propagation{}, fmt.Errorf("statmount: %w", ErrUnsupported)
		default:
			return Propagation{}, fmt.Errorf("statmount of mount %#x: %w", id, errno)
		}
		break
	}
	u64 := func(off int) uint64 { return binary.NativeEndian.Uint64(buf[off:]) }
	if mask := u64(smMask); mask&statmountMntBasic == 0 || mask&statmountMntPoint == 0 {
		return Propagation{}, fmt.Errorf("statmount of mount %#x: the answer lacks the basic mount fields or the mount point (mask %#x)", id, mask)
	}
	p := Propagation{ID: int(binary.NativeEndian.Uint32(buf[smMntIDOld:]))}
	prop := u64(smMntPropagation)
	if prop&unix.MS_SHARED != 0 {
		p.PeerGroup = int(u64(smMntPeerGroup))
	}
	if prop&unix.MS_SLAVE != 0 {
		p.Master = int(u64(smMntMaster))
	}
	p.Unbindable = prop&unix.MS_UNBINDABLE != 0
	off := smStr + int(binary.NativeEndian.Uint32(buf[smMntPoint:]))
	if off >= len(buf) {
		return Propagation{}, fmt.Errorf("statmount of mount %#x: mount point offset %d out of the answer", id, off)
	}
	s := buf[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	p.MountPoint = string(s)
	return p, nil
}
