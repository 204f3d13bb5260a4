package mounttest

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
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
	m, err := fsat.StatmountOf(id)
	if errors.Is(err, unix.ENOENT) {
		return "", false
	}
	if err != nil {
		t.Fatalf("statmount %#x: %v", id, err)
	}
	return m.MountPoint, true
}

// MountPresentUnique reports whether the mount with the unique ID id is in
// this thread's mount namespace.
func MountPresentUnique(t testing.TB, id uint64) bool {
	t.Helper()
	_, ok := MountPointOfUnique(t, id)
	return ok
}
