//go:build linux

package fsat

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errNoMountID is StatMount's error on a kernel whose statx gives no mount
// ID or no mount-root attribute.
var errNoMountID error = &PrefixError{"statx gives no mount ID or mount-root attribute (Linux < 5.8): ", ErrUnsupported}

// StatMount asks statx about the file name in dirfd (name "": dirfd
// itself; dirfd AT_FDCWD and a path: that path) and the mount it is on:
// the one place that queries mount IDs, so that every caller gets the same
// flags, the same EINTR retry and the same kernel fallbacks. A symlink is
// not followed, an automount not triggered, and nothing is asked of the
// file's filesystem (AT_STATX_DONT_SYNC: a FUSE filesystem whose daemon
// stopped answering is not asked; mount IDs, the mount-root attribute,
// the device, inode number and type are the VFS's own).
//
// q says which IDs to ask for. MountKey is one statx call on any kernel:
// the unique ID on Linux 6.8 and later, the classic one before. TableID
// with MountKey costs a second call on Linux 6.8 and later. A query for an
// ID on a kernel that gives none (before Linux 5.8) fails with an error
// matching ErrUnsupported; statx's own errors are returned as the errno.
func StatMount(dirfd int, name string, q MountQuery) (MountStat, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_NO_AUTOMOUNT | unix.AT_STATX_DONT_SYNC
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	mask := unix.STATX_TYPE | unix.STATX_INO | unix.STATX_SIZE
	if q&Usage != 0 {
		mask |= unix.STATX_NLINK | unix.STATX_BLOCKS
	}
	switch {
	case q&MountKey != 0:
		// A kernel before 6.8 ignores the bit it does not know and
		// answers STATX_MNT_ID; one from 6.8 on answers the unique ID
		// only, even when asked for both.
		mask |= unix.STATX_MNT_ID_UNIQUE
	case q&TableID != 0:
		mask |= unix.STATX_MNT_ID
	}
	var sx unix.Statx_t
	if err := statx(dirfd, name, flags, mask, &sx); err != nil {
		return MountStat{}, err
	}
	s := MountStat{
		Root: sx.Attributes_mask&sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0,
		Dev:  unix.Mkdev(sx.Dev_major, sx.Dev_minor),
		Ino:  sx.Ino,
		Size: sx.Size,
		Mode: uint32(sx.Mode) & unix.S_IFMT,
	}
	if q&Usage != 0 {
		s.Nlink, s.Blocks = sx.Nlink, sx.Blocks
	}
	if q&(MountKey|TableID) == 0 {
		return s, nil
	}
	switch {
	case sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0:
		return MountStat{}, errNoMountID
	case sx.Mask&unix.STATX_MNT_ID_UNIQUE != 0:
		s.UniqueID = sx.Mnt_id
	case sx.Mask&unix.STATX_MNT_ID != 0:
		s.ID = sx.Mnt_id
	default:
		return MountStat{}, errNoMountID
	}
	if q&TableID != 0 && s.ID == 0 {
		if err := statx(dirfd, name, flags, unix.STATX_MNT_ID, &sx); err != nil {
			return MountStat{}, err
		}
		if sx.Mask&unix.STATX_MNT_ID == 0 {
			return MountStat{}, errNoMountID
		}
		s.ID = sx.Mnt_id
	}
	return s, nil
}

// struct statmount (include/uapi/linux/mount.h): the offsets of the
// fields read, and the request flags.
const (
	smMask           = 8
	smMntID          = 40
	smMntIDOld       = 56
	smMntPropagation = 72
	smMntPeerGroup   = 80
	smMntMaster      = 88
	smMntPoint       = 108
	smStr            = 512 // offsetof(struct statmount, str)

	statmountMntBasic = 0x2  // STATMOUNT_MNT_BASIC
	statmountMntPoint = 0x10 // STATMOUNT_MNT_POINT
)

// StatmountOf asks statmount(2) (Linux 6.8) about the mount whose unique
// ID is id, in this thread's mount namespace: the one decoder of struct
// statmount. A mount that is not in the namespace (unmounted, or never
// in it) fails with an error matching ENOENT; a kernel without statmount
// with one matching ErrUnsupported.
func StatmountOf(id uint64) (Statmount, error) {
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
			return Statmount{}, fmt.Errorf("statmount: %w", ErrUnsupported)
		default:
			return Statmount{}, fmt.Errorf("statmount of mount %#x: %w", id, errno)
		}
		break
	}
	u64 := func(off int) uint64 { return binary.NativeEndian.Uint64(buf[off:]) }
	if mask := u64(smMask); mask&statmountMntBasic == 0 || mask&statmountMntPoint == 0 {
		return Statmount{}, fmt.Errorf("statmount of mount %#x: the answer lacks the basic mount fields or the mount point (mask %#x)", id, mask)
	}
	m := Statmount{
		UniqueID:    u64(smMntID),
		ID:          uint64(binary.NativeEndian.Uint32(buf[smMntIDOld:])),
		Propagation: u64(smMntPropagation),
		PeerGroup:   u64(smMntPeerGroup),
		Master:      u64(smMntMaster),
	}
	off := smStr + int(binary.NativeEndian.Uint32(buf[smMntPoint:]))
	if off >= len(buf) {
		return Statmount{}, fmt.Errorf("statmount of mount %#x: mount point offset %d out of the answer", id, off)
	}
	s := buf[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	m.MountPoint = string(s)
	return m, nil
}

// ListMounts lists the unique IDs of every mount in this thread's mount
// namespace, in increasing order (listmount(2), Linux 6.8): what tells a
// mount from another made later in its place with the same classic ID and
// the same line in the mount table. A kernel without listmount, or a
// sandbox that refuses it (EPERM, as container runtimes' seccomp profiles
// answer unknown calls), fails with an error matching ErrUnsupported.
func ListMounts() ([]uint64, error) {
	// struct mnt_id_req, version 0: size, spare, mnt_id (LSMT_ROOT: the
	// whole namespace), param (the last ID already listed).
	type mntIDReq struct {
		size, spare   uint32
		mntID, lastID uint64
	}
	req := mntIDReq{size: unix.MNT_ID_REQ_SIZE_VER0, mntID: ^uint64(0)}
	var ids []uint64
	buf := make([]uint64, 512)
	for {
		n, _, errno := unix.Syscall6(unix.SYS_LISTMOUNT, uintptr(unsafe.Pointer(&req)),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
		switch errno {
		case 0:
		case unix.EINTR:
			continue
		case unix.ENOSYS, unix.EPERM:
			return nil, fmt.Errorf("listmount: %v: %w", errno, ErrUnsupported)
		default:
			return nil, fmt.Errorf("listmount: %w", errno)
		}
		ids = append(ids, buf[:n]...)
		if int(n) < len(buf) {
			return ids, nil
		}
		req.lastID = buf[n-1]
	}
}
