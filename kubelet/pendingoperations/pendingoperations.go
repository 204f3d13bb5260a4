package pendingoperations

import (
	"context"
	"errors"
	"runtime/debug"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/volume/util/nestedpendingoperations"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"

	"github.com/nodevol/nodevol/reconciler/pendingops"
)

// Operations is a [nestedpendingoperations.NestedPendingOperations] over
// [pendingops.Operations]. Its methods are safe for concurrent use.
type Operations struct {
	ops *pendingops.Operations
}

var _ nestedpendingoperations.NestedPendingOperations = (*Operations)(nil)

// New returns an empty set. With exponentialBackOffOnError false a failed
// operation leaves no entry (no backoff), as upstream's.
func New(exponentialBackOffOnError bool) *Operations {
	return &Operations{ops: pendingops.New(pendingops.Options{NoBackoff: !exponentialBackOffOnError})}
}

// NewNestedPendingOperations is [New] with the signature of upstream's
// nestedpendingoperations.NewNestedPendingOperations, for the kubelet's
// operation executor.
func NewNestedPendingOperations(exponentialBackOffOnError bool) nestedpendingoperations.NestedPendingOperations {
	return New(exponentialBackOffOnError)
}

func key(volumeName v1.UniqueVolumeName, podName volumetypes.UniquePodName, nodeName types.NodeName) pendingops.Key {
	return pendingops.Key{Volume: string(volumeName), Pod: string(podName), Node: string(nodeName)}
}

// Run starts generatedOperations in its own goroutine under the key
// (volumeName, podName, nodeName), or returns upstream's already-exists or
// exponential-backoff error (see the package doc).
func (o *Operations) Run(volumeName v1.UniqueVolumeName, podName volumetypes.UniquePodName, nodeName types.NodeName,
	generatedOperations volumetypes.GeneratedOperations) error {
	k := key(volumeName, podName, nodeName)
	var escaped any // a panic from CompleteFunc or EventRecorderFunc
	var stack []byte
	run := func(context.Context) (detailedErr error) {
		defer func() {
			if r := recover(); r != nil {
				// Upstream's goroutine sees no error then (its results
				// are never set) and removes the entry before crashing.
				escaped, stack, detailedErr = r, debug.Stack(), nil
			}
		}()
		_, detailedErr = generatedOperations.Run()
		return detailedErr
	}
	done := func(err error) {
		if escaped != nil {
			// HandleCrash logs the stack it runs on; this is where it began.
			klog.Errorf("operation %q for %s panicked: %v\n%s", generatedOperations.OperationName, k, escaped, stack)
			crash(escaped)
			return
		}
		if err != nil {
			klog.Errorf("operation %q for %s failed: %v", generatedOperations.OperationName, k, err)
		}
	}
	return upstreamError(k, o.ops.Run(context.Background(), k, pendingops.OpName(generatedOperations.OperationName), run, done))
}

// crash hands a panic to utilruntime.HandleCrash, which logs it and
// panics again unless utilruntime.ReallyCrash is false.
func crash(v any) {
	defer utilruntime.HandleCrash()
	panic(v)
}

// upstreamError converts pendingops' refusals into upstream's errors.
func upstreamError(k pendingops.Key, err error) error {
	var exists *pendingops.AlreadyExistsError
	var backoff *pendingops.BackoffError
	switch {
	case errors.As(err, &exists):
		return newAlreadyExistsError(k)
	case errors.As(err, &backoff):
		return newBackoffError(k, backoff)
	}
	return err
}

// Wait blocks until no operation is running. Unlike upstream's, it does
// not wait for failed entries to go away.
func (o *Operations) Wait() {
	_ = o.ops.Wait(context.Background()) // never done: no error
}

// IsOperationPending reports whether an operation matching the key is
// running.
func (o *Operations) IsOperationPending(volumeName v1.UniqueVolumeName, podName volumetypes.UniquePodName, nodeName types.NodeName) bool {
	return o.ops.IsPending(key(volumeName, podName, nodeName))
}

// IsOperationSafeToRetry reports whether Run would start operationName on
// the key now: nothing matching is running, and the matching entry is not
// backing off from a failure of operationName.
func (o *Operations) IsOperationSafeToRetry(volumeName v1.UniqueVolumeName, podName volumetypes.UniquePodName, nodeName types.NodeName, operationName string) bool {
	return o.ops.IsSafeToRetry(key(volumeName, podName, nodeName), pendingops.OpName(operationName))
}

// Entries returns a snapshot of the entries, running and failed, in the
// order equal matches are chosen: for debugging, and for the shim that
// runs upstream's tests. See [pendingops.Operations.Entries].
func (o *Operations) Entries() []pendingops.Entry {
	return o.ops.Entries()
}
