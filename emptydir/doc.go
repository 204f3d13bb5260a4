// Package emptydir is the kubernetes.io/empty-dir volume plugin, with one
// promise the kubelet's does not keep: tearing a volume down never deletes
// data that lives on another mount, and never follows a path out of the
// volume.
//
// It uses the kubelet's on-disk layout and "ready" marker, so it can take
// over an existing node, and records what SetUp created (medium, tmpfs size,
// huge page size, quota project) in a small nodevol.json beside the marker.
//
// SetUp:
//   - Default: a directory with mode 0777 (01777 with StickyBit), whatever
//     the umask;
//   - Memory: a tmpfs whose size= is the smallest positive of the node's
//     allocatable memory, the pod's memory limit and the volume's
//     sizeLimit, with noswap on Linux 6.3 and later;
//   - HugePages / HugePages-<size>: a hugetlbfs with pagesize= from the
//     pod's hugepage requests (plain HugePages needs exactly one size).
//
// SetUp is idempotent, and repairs a ready volume whose directory or mount
// vanished.
//
// TearDown (PlanTearDown says the same without acting):
//   - nothing there: success (leftover metadata is removed);
//   - any mount beneath the volume directory: refused, nothing changes —
//     ready marker and metadata stay, so a retry or a restart sees the same
//     state — and the error (a *RefusedError wrapping a
//     *mountdetect.CrossesMountError, errors.Is mountdetect.ErrCrossesMount)
//     lists every mount;
//   - the directory is a tmpfs or hugetlbfs mount: unmounted (never lazily:
//     a busy mount is an error), then removed;
//   - the directory is the mount point of anything else (an NFS share
//     mounted on it), or the kernel cannot say whether it is one: refused;
//   - Default: the quota (if one was assigned) is cleared — an error is
//     returned, not logged — then the tree is removed with
//     mountdetect.RemoveAll, which stops at mounts that appear meanwhile;
//     the metadata goes last.
//
// Errors are *volume.OperationError values classified Transient (retry
// after backoff: a refusal, an I/O error), Uncertain (an unmount failed) or
// Final (a configuration that retrying cannot fix).
//
// Not covered: mounts in other mount namespaces are invisible here; see
// mountdetect's documentation for the walk's own limits.
package emptydir
