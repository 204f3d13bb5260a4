package mountdetect

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
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
	t, err := readMountTable()
	if err != nil {
		return Propagation{}, fmt.Errorf("propagation of %s: %w", path, err)
	}
	e, ok := t.byMountID(id)
	if !ok {
		// Unmounted between the two calls.
		return Propagation{}, fmt.Errorf("propagation of %s: mount %d is not in the mount table", path, id)
	}
	p, err := parsePropagation(e.optional)
	if err != nil {
		return Propagation{}, fmt.Errorf("propagation of %s: %w", path, err)
	}
	p.MountPoint, p.ID = e.MountPoint, id
	return p, nil
}

// statmountPropagation asks statmount(2) about the mount with the unique
// ID id. ErrUnsupported: the kernel has no statmount.
func statmountPropagation(id uint64) (Propagation, error) {
	m, err := fsat.StatmountOf(id)
	if errors.Is(err, fsat.ErrUnsupported) {
		return Propagation{}, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if err != nil {
		return Propagation{}, err
	}
	p := Propagation{ID: int(m.ID), MountPoint: m.MountPoint, Unbindable: m.Propagation&unix.MS_UNBINDABLE != 0}
	if m.Propagation&unix.MS_SHARED != 0 {
		p.PeerGroup = int(m.PeerGroup)
	}
	if m.Propagation&unix.MS_SLAVE != 0 {
		p.Master = int(m.Master)
	}
	return p, nil
}
