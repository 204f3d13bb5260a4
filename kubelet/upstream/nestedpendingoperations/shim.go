// Package nestedpendingoperations runs upstream's
// pkg/volume/util/nestedpendingoperations tests (added by hack/upstream,
// see UPSTREAM) against [pendingoperations]. It declares only the names the
// test file uses, each delegating to the adapter or, for the error
// helpers, to upstream's own: that they recognise the adapter's errors is
// part of what the tests check.
package nestedpendingoperations

import (
	"iter"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	upstream "k8s.io/kubernetes/pkg/volume/util/nestedpendingoperations"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"

	"github.com/nodevol/nodevol/kubelet/pendingoperations"
)

// The empty names, upstream's.
const (
	EmptyUniquePodName    = upstream.EmptyUniquePodName
	EmptyUniqueVolumeName = upstream.EmptyUniqueVolumeName
	EmptyNodeName         = upstream.EmptyNodeName
)

// NestedPendingOperations is upstream's interface.
type NestedPendingOperations = upstream.NestedPendingOperations

// NewNestedPendingOperations returns the adapter, wrapped so that the one
// test that looks inside (grm.(*nestedPendingOperations)) finds what it
// looks for.
func NewNestedPendingOperations(exponentialBackOffOnError bool) NestedPendingOperations {
	ops := pendingoperations.New(exponentialBackOffOnError)
	return &nestedPendingOperations{Operations: ops, operations: entries(ops)}
}

// IsAlreadyExists is upstream's helper.
func IsAlreadyExists(err error) bool { return upstream.IsAlreadyExists(err) }

// nestedPendingOperations is the adapter with upstream's two inner fields
// the tests read.
type nestedPendingOperations struct {
	*pendingoperations.Operations

	// lock is held by the test while it reads operations. It guards
	// nothing else: operations reads a snapshot that pendingops takes
	// under its own lock. (Only the upstream test file, which -overlay adds,
	// uses it.)
	//lint:ignore U1000 used by the upstream test file hack/upstream adds
	lock sync.Mutex

	// operations ranges over the adapter's current entries (a snapshot
	// taken when the range starts), in the order upstream would list them.
	operations iter.Seq2[int, operation]
}

type operation struct {
	key              operationKey
	operationName    string
	operationPending bool
}

type operationKey struct {
	volumeName v1.UniqueVolumeName
	podName    volumetypes.UniquePodName
	nodeName   types.NodeName
}

func entries(ops *pendingoperations.Operations) iter.Seq2[int, operation] {
	return func(yield func(int, operation) bool) {
		for i, e := range ops.Entries() {
			op := operation{
				key:              operationKey{v1.UniqueVolumeName(e.Key.Volume), volumetypes.UniquePodName(e.Key.Pod), types.NodeName(e.Key.Node)},
				operationName:    string(e.Op),
				operationPending: e.Pending,
			}
			if !yield(i, op) {
				return
			}
		}
	}
}
