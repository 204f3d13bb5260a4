// Package driver is nodevol-csi: a CSI node plugin that serves inline
// ephemeral volumes with emptyDir semantics and nodevol's promise —
// tearing a volume down never deletes data on another mount and never
// follows a path out of the volume — on a stock kubelet.
//
// A pod asks for it instead of an emptyDir:
//
//	volumes:
//	- name: scratch
//	  csi:
//	    driver: emptydir.nodevol.github.io
//	    volumeAttributes: {medium: Memory, sizeLimit: 1Gi}
//
// # What it does
//
// NodePublishVolume takes only an inline ephemeral volume (the kubelet sets
// csi.storage.k8s.io/ephemeral=true; a PersistentVolume is refused) at
// exactly the kubelet's target path, <root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount
// under the configured kubelet root. Attributes: medium (Default or
// Memory) and sizeLimit (a quantity); any other attribute, a block or
// read-only volume, a filesystem type or mount flags are refused with
// INVALID_ARGUMENT naming every problem. The volume is the emptydir
// package's, placed at the target (emptydir.Location with Sub "mount"):
// Default is a directory on the kubelet's filesystem with a project quota
// whose hard limit is sizeLimit where the filesystem has project quotas
// (Config.Quotas); Memory is a tmpfs of size sizeLimit (bounded by
// Config.MemoryBytes), with noswap where the kernel has it, made detached
// and attached onto the open target directory. What was made is recorded
// in nodevol.json in the pod's plugins/kubernetes.io~empty-dir/csi_<volume>,
// so a restarted driver recognises it. Publishing again is a no-op.
//
// NodeUnpublishVolume is the emptyDir teardown: while anything that is not
// the volume's own is mounted in or on it, it answers FAILED_PRECONDITION
// naming every such mount and changes nothing; the kubelet retries with
// backoff, and once those mounts are gone the volume goes. It unmounts only
// a tmpfs proven its own (recorded source and mount ID), clears the quota,
// and removes the target with mountdetect's boundary-safe removal. A
// target that is gone is success.
//
// NodeGetVolumeStats reports the use from the quota, the tmpfs or a walk
// that stays on the volume's mount; a volume with a foreign mount on it is
// not measured (FAILED_PRECONDITION). The walk counts a hard-linked file
// once for the first mountdetect.MaxHardLinkedInodes of them (1 MiB of the
// driver's memory at most per call); past that the numbers are an upper
// bound, which the response header nodevol-usage-bound ("upper"), the log
// and nodevol_csi_usage_upper_bound_total say.
//
// # Reached by descriptors
//
// The target path is checked as text first (absolute, clean, the kubelet's
// shape under the root); then the kubelet root is opened once (it may be
// a symlink: it is trusted) and every directory below it by descriptor,
// without following symlinks, on the pod directory's mount. Whoever can
// write into the pod directory — a container with bidirectional mount
// propagation — cannot redirect the driver with a symlink or a mount: a
// symlink where a directory belongs is an error, and nothing is made or
// removed through it.
//
// # Limits
//
//   - The kubelet does not account a CSI volume's use in the pod's
//     ephemeral-storage, so a Default volume is never the reason for an
//     eviction: where the filesystem has project quotas its sizeLimit is a
//     hard limit instead (writes fail with EDQUOT or ENOSPC); where it has
//     none, sizeLimit is not enforced for Default volumes.
//   - A Memory volume's tmpfs counts against the pod's memory cgroup as an
//     emptyDir's does, but its size is sizeLimit or Config.MemoryBytes, not
//     the pod's memory limit (the driver is not told the pod's resources).
//   - One process per driver name and kubelet root: Serve holds the
//     root's lock for the driver's name (volume.LockCSIDriver, a flock on
//     <root>/nodevol-csi-<name>.lock released when the process ends); a
//     second one is refused, naming the first. So a DaemonSet update must
//     stop the old pod before it starts the new one (maxUnavailable, as
//     deploy/csi has it): with maxSurge the new pod exits until the old
//     one is gone. A volume manager (reconciler.Manager, nodevol
//     teardown) and drivers of other names have locks of their own and
//     share the root; nodevol-kubelet takes none.
//   - The driver serves the kubelet's plugin-registration API itself
//     (Serve with RegistrationDir), so no node-driver-registrar sidecar is
//     needed. It has no controller service: csi-sanity's controller specs
//     do not apply.
package driver
