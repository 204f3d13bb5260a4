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
//     statfs by path.
//   - SetUpAt and TearDownAt act only on the volume's own directory.
package volumeplugin
