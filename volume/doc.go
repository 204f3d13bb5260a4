// Package volume is nodevol's volume plugin API.
//
//   - Names: plugin names are Kubernetes qualified names ([prefix/]name),
//     escaped to directory names by replacing '/' with '~' and back,
//     losslessly (a valid name has no '~'). Pod UIDs, volume names and
//     container names are validated; a violation is an [*InvalidNameError]
//     naming the field and the value (errors.Is [ErrInvalidName]).
//   - [Layout]: the kubelet's on-disk layout under a root (default
//     /var/lib/kubelet). Every component is validated before it is joined,
//     so no Layout method can return a path outside the root, and
//     [Layout.ParseVolumePath] turns a volume directory back into (pod UID, plugin,
//     volume).
//   - Scanning: [Layout.ScanVolumes] lists every volume directory on disk,
//     by descriptors, without following symlinks. With [ScanLimits] it
//     reads a bounded number of directory entries, the same share for
//     every pod ([EntryBudget], handed on for the pod's subPath trees), so
//     that a pod that fills its own directory is reported over its budget
//     and hides no other pod; reconstruction sets no limits. With
//     [WithPluginDir] a caller examines each plugin directory's volumes
//     through the descriptor that was listed ([PluginDir], with the pod
//     directory it was reached from), while ScanVolumes holds it open,
//     instead of opening it again by name.
//   - Types: [Spec] (with [EmptyDirSource]), [Pod], unique names, and
//     the emptyDir [Medium] with its Kubernetes quantities.
//   - Plugins: small interfaces — [Plugin], [Mounter], [Unmounter], the
//     optional [SpecConstructor] for reconstruction after a restart,
//     [LayoutProvider] and [TearDownChecker], and [Host] for what plugins need from the node —
//     and a [Registry] that validates names,
//     rejects duplicates and finds exactly one plugin for a spec.
//   - [LockRoot]: one owner of each kind per kubelet root. Two volume
//     managers ([LockVolumeManager]) or two processes serving one CSI
//     driver ([LockCSIDriver]) on one root tear down each other's volumes;
//     the second gets a [*RootLockedError] naming the first. A flock on
//     <root>/nodevol-<owner>.lock, released when the holder dies.
//   - Errors: [*OperationError] classifies failures as [Final], [Transient]
//     or [Uncertain], wrapping the cause so errors.Is/As still reach it.
//
// Of nodevol the package imports only two base helpers, internal/base/fsat
// (descriptor-relative system calls) and internal/base/memsize (sizes), which
// import nothing of nodevol: a plugin built on volume pulls in no other
// part of nodevol.
package volume
