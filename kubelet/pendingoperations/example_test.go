package pendingoperations_test

import (
	"errors"
	"fmt"

	"k8s.io/kubernetes/pkg/util/goroutinemap/exponentialbackoff"
	"k8s.io/kubernetes/pkg/volume/util/nestedpendingoperations"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"

	"github.com/nodevol/nodevol/kubelet/pendingoperations"
)

// The kubelet's operation executor takes any NestedPendingOperations; this
// one answers with upstream's errors, which upstream's helpers recognise.
func Example() {
	ops := pendingoperations.NewNestedPendingOperations(true /* exponentialBackOffOnError */)
	const volume = "kubernetes.io/empty-dir/8a3f0c52-cache"

	release := make(chan struct{})
	_ = ops.Run(volume, "8a3f0c52", "", volumetypes.GeneratedOperations{
		OperationName: "volume_mount",
		OperationFunc: func() volumetypes.OperationContext {
			<-release // SetUp takes a while
			return volumetypes.NewOperationContext(nil, nil, false)
		},
	})
	// A volume-wide operation matches every pod's.
	err := ops.Run(volume, "", "", volumetypes.GeneratedOperations{OperationName: "volume_unmount"})
	fmt.Println("unmount while mounting:", nestedpendingoperations.IsAlreadyExists(err))
	close(release)
	ops.Wait()

	fail := volumetypes.GeneratedOperations{
		OperationName: "volume_unmount",
		OperationFunc: func() volumetypes.OperationContext {
			err := errors.New("device busy")
			return volumetypes.NewOperationContext(err, err, false)
		},
	}
	_ = ops.Run(volume, "8a3f0c52", "", fail)
	ops.Wait()
	err = ops.Run(volume, "8a3f0c52", "", fail)
	fmt.Println("retry at once:", exponentialbackoff.IsExponentialBackoff(err))
	// Output:
	// unmount while mounting: true
	// retry at once: true
}
