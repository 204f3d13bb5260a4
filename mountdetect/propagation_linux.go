package mountdetect

import (
	"fmt"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
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
// path is resolved like any path given by the caller (symlinks followed);
// the mount is found by the mount ID statx reports for it (STATX_MNT_ID,
// Linux 5.8), then its line in /proc/thread-self/mountinfo. The answer is
// about the moment of the call.
func PropagationOf(path string) (Propagation, error) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_MNT_ID, &sx); err != nil {
		return Propagation{}, fmt.Errorf("propagation of %s: statx: %w", path, err)
	}
	if sx.Mask&unix.STATX_MNT_ID == 0 {
		return Propagation{}, fmt.Errorf("propagation of %s: statx gives no mount ID (Linux 5.8 and later do): %w", path, ErrUnsupported)
	}
	id := int(sx.Mnt_id)
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
