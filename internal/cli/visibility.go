package cli

import (
	"fmt"

	"github.com/nodevol/nodevol/mountdetect"
)

// rootVisibility is whether the mounts the host makes under the kubelet
// root are seen from this process, and why: in the host's mount
// namespace they are; in another (a DaemonSet's container) only when the
// root is on a mount that receives propagation (a hostPath with
// mountPropagation HostToContainer is a slave of the host's mount,
// Bidirectional a shared peer). The mounts that exist when a container
// starts are copied into its namespace either way; what a private root
// misses is every mount made after, such as a NAS mounted into a running
// pod's emptyDir.
type rootVisibility struct {
	visible bool
	why     string
	// err is why the propagation could not be read (the root missing,
	// say); the check is then made again at the next scan.
	err error
}

// checkRootVisibility tells rootVisibility for root (as this process
// names it) in namespace ns; propagationOf is mountdetect.PropagationOf
// but for tests.
func checkRootVisibility(ns mountdetect.MountNamespace, root string, propagationOf func(string) (mountdetect.Propagation, error)) rootVisibility {
	if ns.State == mountdetect.MountNamespaceHost {
		return rootVisibility{visible: true, why: "in " + ns.String()}
	}
	p, err := propagationOf(root)
	switch {
	case err != nil:
		return rootVisibility{err: err, why: fmt.Sprintf("%s, and whether mounts made on the host under %s reach this one cannot be told: %v", ns, root, err)}
	case p.Receives():
		return rootVisibility{visible: true, why: fmt.Sprintf("%s, but %s is on a mount that receives the host's mounts (%s at %s; mountPropagation HostToContainer or Bidirectional)", ns, root, p, p.MountPoint)}
	}
	return rootVisibility{why: fmt.Sprintf("%s, and %s is on a %s mount (at %s): a mount the host makes under it after this process started is not seen here; give the hostPath mountPropagation: HostToContainer", ns, root, p, p.MountPoint)}
}
