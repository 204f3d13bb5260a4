package mountdetect

import (
	"fmt"
	"strconv"
	"strings"
)

// Propagation is how mount and unmount events reach one mount from other
// mounts (mount_namespaces(7), "Shared subtrees"), as the optional fields
// of its line in /proc/PID/mountinfo tell (proc(5)).
type Propagation struct {
	// MountPoint is the mount point of the mount, as this process's mount
	// table lists it; ID its mount ID there.
	MountPoint string
	ID         int
	// PeerGroup is N of "shared:N": the mount is shared, and mounts made
	// under any peer of the group appear under it (and the other way
	// round). 0 when it is not shared.
	PeerGroup int
	// Master is N of "master:N": the mount is a slave of peer group N, and
	// mounts made under that group's mounts appear under it (but not the
	// other way round). 0 when it is not a slave.
	Master int
	// Unbindable: "unbindable", which only private mounts are.
	Unbindable bool
}

// Receives reports whether mounts made later under another mount (a
// peer's, or the master's) appear under this one: the mount is shared or
// a slave. A container's hostPath with mountPropagation HostToContainer
// is a slave of the host's mount, with Bidirectional a shared peer of it;
// with None (the default) it is private, and a mount the host makes
// under the hostPath after the container started is not seen in the
// container.
func (p Propagation) Receives() bool { return p.PeerGroup != 0 || p.Master != 0 }

// String names the propagation as mount(8) and findmnt do, with the
// groups: "shared:3", "slave (master:5)", "shared:3, slave (master:5)",
// "private", "unbindable".
func (p Propagation) String() string {
	var parts []string
	if p.PeerGroup != 0 {
		parts = append(parts, "shared:"+strconv.Itoa(p.PeerGroup))
	}
	if p.Master != 0 {
		parts = append(parts, "slave (master:"+strconv.Itoa(p.Master)+")")
	}
	switch {
	case len(parts) > 0:
		return strings.Join(parts, ", ")
	case p.Unbindable:
		return "unbindable"
	}
	return "private"
}

// parsePropagation reads the optional fields of a mountinfo line
// ("shared:1 master:2"; empty for a private mount). Fields it does not
// know (propagate_from:N, which comes with master:N, and any the kernel
// adds later) are skipped; a known field with a malformed number is an
// error.
func parsePropagation(optional string) (Propagation, error) {
	var p Propagation
	for _, f := range strings.Fields(optional) {
		tag, val, hasVal := strings.Cut(f, ":")
		var dst *int
		switch tag {
		case "shared":
			dst = &p.PeerGroup
		case "master":
			dst = &p.Master
		case "unbindable":
			p.Unbindable = true
			continue
		default:
			continue
		}
		n, err := strconv.Atoi(val)
		if !hasVal || err != nil || n <= 0 {
			return Propagation{}, fmt.Errorf("mountinfo optional field %q: not %s:N with N a positive number", f, tag)
		}
		*dst = n
	}
	return p, nil
}
