// Package pendingoperations is the kubelet's nested pending operations
// (k8s.io/kubernetes/pkg/volume/util/nestedpendingoperations) on top of
// nodevol's [pendingops]: a drop-in [nestedpendingoperations.NestedPendingOperations]
// for the kubelet's operation executor.
//
// # What it guarantees, as upstream does
//
// Run starts an operation in its own goroutine unless one with a matching
// key (volume, pod, node) is running, and backs off after failures:
//
//   - An empty volume name matches nothing: the operation always runs.
//     An empty pod or node name matches any pod or node, on either side.
//   - A matching running operation makes Run return upstream's
//     already-exists error: [nestedpendingoperations.IsAlreadyExists] is true.
//   - A matching entry whose last run of the same operation name failed
//     less than its backoff ago (500 ms, doubling to 2m2s) makes Run return
//     upstream's exponential-backoff error:
//     [exponentialbackoff.IsExponentialBackoff] is true. A different
//     operation name resets the backoff. With exponentialBackOffOnError
//     false a failed operation leaves nothing behind.
//   - Among several matching entries the choice is upstream's: a running one
//     first, then the exact key, then the first in the kubelet's own list
//     order (see [pendingops] for the rule).
//   - The operation is run by [volumetypes.GeneratedOperations.Run], upstream's
//     own method, so OperationFunc, EventRecorderFunc (with EventErr) and
//     CompleteFunc (with DetailedErr) are called exactly as upstream calls
//     them. A panic in OperationFunc becomes the detailed error that
//     method returns (CompleteFunc, which reads the OperationContext, sees
//     nil, as upstream's does). The detailed error alone decides failure. A panic that escapes (from CompleteFunc or
//     EventRecorderFunc) is handled as upstream handles it: the entry is
//     removed as if the operation had succeeded, then the panic goes to
//     [utilruntime.HandleCrash], which crashes the process unless
//     [utilruntime.ReallyCrash] is false.
//
// The errors are upstream's own (unexported) types, built through their
// exported constructors, because upstream's helpers recognise nothing else:
// they switch on the dynamic type. For the same reason
// errors.Is(err, pendingops.ErrAlreadyExists) or pendingops.ErrBackoff cannot
// hold for them: those types have no Is or Unwrap method and none can be
// added. Their messages name the key, and the backoff's last error, failure
// time and duration, as upstream's do.
//
// # Where it differs, deliberately
//
//   - Lookups are indexed by volume instead of a scan of every operation on
//     the node (see [pendingops]).
//   - A failed entry is forgotten once its backoff has expired and it has
//     stayed idle for [pendingops.DefaultForgetAfter]; upstream keeps it until
//     a later run on its key succeeds, that is, possibly forever. Forgetting
//     changes only what a later failure on that key backs off from (500 ms
//     again rather than the doubled duration), and which entry a wildcard
//     key matches.
//   - Wait returns once no operation is running. Upstream's Wait also waits
//     for failed entries to go away, which never happens for an operation
//     that is not retried successfully.
//   - An operation with an empty volume name leaves no entry (upstream lists
//     it, and with backoff keeps it after a failure although nothing can
//     ever match it).
package pendingoperations
