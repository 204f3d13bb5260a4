package pendingops_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodevol/nodevol/reconciler/pendingops"
)

// At most one operation runs per key: a second one on the same volume and
// pod is refused while the first is pending, and a failure backs off.
func Example() {
	ops := pendingops.New(pendingops.Options{})
	ctx := context.Background()
	key := pendingops.Key{Volume: "kubernetes.io/empty-dir/8a3f0c52-cache", Pod: "8a3f0c52"}

	release := make(chan struct{})
	_ = ops.Run(ctx, key, pendingops.OpMount, func(context.Context) error {
		<-release // SetUp takes a while
		return nil
	}, nil)
	err := ops.Run(ctx, key, pendingops.OpMount, func(context.Context) error { return nil }, nil)
	fmt.Println("second mount:", errors.Is(err, pendingops.ErrAlreadyExists))
	close(release)
	_ = ops.Wait(ctx)

	_ = ops.Run(ctx, key, pendingops.OpUnmount, func(context.Context) error {
		return errors.New("device busy")
	}, nil)
	_ = ops.Wait(ctx)
	err = ops.Run(ctx, key, pendingops.OpUnmount, func(context.Context) error { return nil }, nil)
	var backoff *pendingops.BackoffError
	fmt.Println("retry at once:", errors.As(err, &backoff))
	// Output:
	// second mount: true
	// retry at once: true
}
