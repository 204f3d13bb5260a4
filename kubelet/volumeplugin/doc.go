// Package volumeplugin is nodevol's emptyDir plugin as a kubelet volume
// plugin: it implements k8s.io/kubernetes/pkg/volume's VolumePlugin,
// Mounter, Unmounter, MetricsProvider and ResizableEphemeralVolumePlugin for
// kubernetes.io/empty-dir on top of [emptydir.Plugin], so that a kubelet
// built with it in place of upstream's emptydir plugin keeps nodevol's
// promise: tearing an emptyDir down never deletes data on another mount,
// never unmounts a mount SetUp did not make, and never follows a path out
// of the volume.
//
// The kubelet's types are converted with the kubelet's own helpers: the
// pod's memory limit as cm.ResourceConfigForPod computes it for the pod's
// cgroup, huge page requests as v1helper reads them (pod-level requests
// with the PodLevelResources feature), the volume's medium and sizeLimit
// from its v1.EmptyDirVolumeSource; the Memory volume's tmpfs size and the
// HugePages page size are then nodevol's (see [emptydir.MountSizes]),
// which follow the same rules.
//
// # Differences from the kubelet's plugin
//
//   - nodevol mounts tmpfs and hugetlbfs itself (detached, then attached
//     onto the open volume directory, and recorded), so the VolumeHost's
//     mount.Interface is not used; a FakeMounter given to the host sees no
//     calls.
//   - TearDown refuses, changing nothing, when a mount is found inside the
//     volume or a mount on it is not the one SetUp made; the kubelet
//     retries, and the refusal's error lists the mounts.
//   - A SetUp failure after the disk was touched is a
//     *volumetypes.UncertainProgressError (the kubelet then tears the
//     volume down when the pod goes); the kubelet tests the type by
//     assertion, so nodevol's error survives only as its message.
//   - Usage comes from descriptors (emptydir.Plugin.Usage), not from du and
//     statfs by path. A Default volume with more hard-linked files than the
//     walk remembers is over-counted (emptydir.Usage.UpperBound), which
//     the kubelet's Metrics cannot say.
//   - The plugin takes no kubelet-root lock (volume.LockRoot): the kubelet
//     is the root's volume manager, a plugin has no lifetime to hold a lock
//     for, and the kubelet's --lock-file keeps kubelets apart. A
//     reconciler.Manager must not run on a kubelet's root.
//   - SetUpAt and TearDownAt act on the volume's own directory, or on
//     another plugin's volume directory of the same pod under the same
//     kubelet root (see below); any other directory is refused
//     ([ErrOtherDirectory]).
//
// # Wrapper volumes
//
// The kubelet's secret, configMap, downwardAPI and projected plugins set
// up a Memory emptyDir in their own volume directory: the host's
// NewWrapperMounter asks this plugin for a mounter of a spec named
// "wrapped_<volume>" and calls its SetUpAt on
// pods/<uid>/volumes/kubernetes.io~secret/<volume> (or ~configmap,
// ~downward-api, ~projected); UnmountViaEmptyDir asks NewUnmounter for
// "wrapped_<volume>" and calls TearDownAt on the same directory. The
// adapter serves them with [emptydir.Plugin.NewMounterAt] and
// [emptydir.Plugin.NewUnmounterAt]: the directory is parsed with the
// kubelet root's layout (same pod, another plugin than
// kubernetes.io/empty-dir), the metadata is kept under the mounter's name
// in plugins/kubernetes.io~empty-dir, as upstream keeps it, and every
// guarantee above holds there too. "wrapped_<volume>" is not a DNS label,
// so NewMounter accepts such a name (a single directory name) and leaves
// nodevol's mounter to SetUpAt; SetUp on the volume's own path with such
// a name is refused (volume.ErrInvalidName), and so is SetUpAt in another
// plugin's directory with a name that is a DNS label
// ([emptydir.ErrInvalidLocation]: it could be an ordinary emptyDir's
// metadata). GetMetrics of a wrapper mounter is refused
// ([emptydir.ErrLocatedUnsupported]): the wrapping plugin measures its own
// directory.
package volumeplugin
