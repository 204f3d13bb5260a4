// Package reconciler is the volume manager a custom kubelet embeds: the
// desired state of world (pods and the volumes they want), the actual
// state of world (volumes set up, mounted or uncertain), the reconciler
// loop between them, reconstruction after a restart, and the [Manager]
// facade.
//
// The loop is event-driven: [Manager.AddPod], [Manager.RemovePod] and
// every finished operation wake it at once and mark the pods concerned,
// so a pass looks only at what changed (with nothing changed it costs
// nanoseconds and allocates nothing), and a periodic full pass
// ([Options].ResyncPeriod) is the safety net. A pass first tears down what
// no pod wants, then sets up what pods want and lack, like the kubelet's
// reconciler. Operations run through an internal executor and [pendingops]: one at
// a time per volume and pod, with exponential backoff after failures; a
// backoff's expiry wakes the loop again.
//
// Nothing is torn down before [Manager.MarkSourcesReady]: after a restart
// the volumes found on disk are put into the actual state as uncertain,
// and only once every pod source has re-added its pods are the unwanted
// ones torn down — through the same plugin TearDown, which for emptyDir
// never deletes data on another mount. Wanted ones are verified by SetUp.
// Unknown plugins and names that do not parse are recorded
// ([Manager.Problems]) and left alone. A pod directory is removed when its
// pod is gone and its volumes are, reached by descriptor from the kubelet
// root: volumes/ with rmdir only, the rest with [mountdetect.RemoveAllAt].
//
// Lifecycle: [New] checks the options (Plugins is required; the kubelet
// root is taken from the plugins that know it, [volume.LayoutProvider],
// and a different Options.Root is refused with [ErrRootMismatch]).
// [Manager.Run] runs once (a second call returns [ErrRunTwice]); when its
// context is done it starts nothing new and returns only after the
// running operations have, so a new Manager on the same root never
// overlaps them.
//
// One Manager per kubelet root: Run holds the root's volume-manager lock
// ([volume.LockRoot], a flock on <root>/nodevol-volume-manager.lock that
// the kernel releases when the process ends, however it ends) until it
// returns. A second Manager on the root, in this process or another,
// would tear down every volume of the first one's pods; its Run returns
// a [*volume.RootLockedError] naming the holder (PID, program, since
// when), having touched nothing. `nodevol teardown` takes the same lock
// while it tears down. Other owners have locks of their own and share the
// root: nodevol-csi (one lock per driver name), whose volumes are not the
// Manager's plugins'. A kubelet — stock, or nodevol-kubelet with nodevol's
// emptyDir plugin — is its root's volume manager too but takes no such
// lock (its plugins have no lifetime to hold it for; the kubelet's own
// --lock-file keeps kubelets apart): never run a Manager on a kubelet's
// root. An embedder waits for a pod with [Manager.WaitForMount],
// [Manager.WaitForUnmount] (its volumes are torn down) and
// [Manager.WaitForPodRemoval] (its directory is gone too: the pod may be
// forgotten); on timeout each error says what is missing and why.
//
// Plugins arrive through the [volume] package's interfaces: this package
// never imports emptydir. It does use [mountdetect] (the safety core) to
// remove pod directories and to count refused teardowns.
//
// Metrics ([Options].Registerer): nodevol_volume_operation_duration_seconds
// {operation, plugin, status}, nodevol_volumes{plugin, state},
// nodevol_teardown_refused_total{plugin}. A second Manager on the same
// registerer shares them (client_golang's AlreadyRegisteredError
// convention); [prometheus.WrapRegistererWith] keeps Managers apart.
package reconciler
