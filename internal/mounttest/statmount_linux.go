package mounttest

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/fsat"
)

// A mount's classic ID (statx STATX_MNT_ID, the first field of mountinfo)
// is reused, lowest free first, as soon as the mount is gone, by any
// mount in any namespace: a test that asks "is the mount I saw still
// there?" by that ID can be answered by another mount. Unique mount IDs
// (Linux 6.8: STATX_MNT_ID_UNIQUE, statmount(2)) are never reused.

// UniqueMountID returns the unique ID of the mount path is the root of
// (not following a final symlink). It fails the test when path is not a
// mount root, and skips it (fails under CI=true) before Linux 6.8.
func UniqueMountID(t testing.TB, path string) uint64 {
	t.Helper()
	s, err := fsat.StatMount(unix.AT_FDCWD, path, fsat.MountKey)
	if err != nil {
		t.Fatalf("statx %s: %v", path, err)
	}
	if s.UniqueID == 0 {
		Skip(t, "the kernel has no unique mount IDs (Linux < 6.8)")
	}
	if !s.Root {
		t.Fatalf("%s is not a mount root", path)
	}
	return s.UniqueID
}

// MountPointOfUnique returns where the mount with the unique ID id is
// mounted in this thread's mount namespace, and false when it is in none
// (unmounted, or never in this namespace).
func MountPointOfUnique(t testing.TB, id uint64) (string, bool) {
	t.Helper()
	// struct mnt_id_req (version 0: size, spare, mnt_id, param).
	var req [3]uint64
	req[0] = unix.MNT_ID_REQ_SIZE_VER0
	req[1] = id
	req[2] = statmountMntPoint
	buf := make([]byte, 4096)
	for {
		_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req[0])),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
		switch {
		case errno == 0:
		case errno == unix.ENOENT:
			return "", false
		case errno == unix.EOVERFLOW:
			buf = make([]byte, 2*len(buf))
			continue
		case errno == unix.EINTR:
			continue
		default:
			t.Fatalf("statmount %#x: %v", id, errno)
		}
		break
	}
	// struct statmount: mask at 8, mnt_point (an offset into str) at 108,
	// str at 512.
	if binary.NativeEndian.Uint64(buf[8:])&statmountMntPoint == 0 {
		t.Fatalf("statmount %#x: no mount point in the answer", id)
	}
	s := buf[statmountStr+int(binary.NativeEndian.Uint32(buf[108:])):]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s), true
}

// MountPresentUnique reports whether the mount with the unique ID id is in
// this thread's mount namespace.
func MountPresentUnique(t testing.TB, id uint64) bool {
	t.Helper()
	_, ok := MountPointOfUnique(t, id)
	return ok
}

const (
	statmountMntPoint = 0x10 // STATMOUNT_MNT_POINT
	statmountStr      = 512  // offsetof(struct statmount, str)
)
