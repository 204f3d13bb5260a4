package harness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is matched by the error of poll when the condition did not
// hold in time.
var ErrTimeout = errors.New("timed out")

// pollInterval is how often poll asks; the measured times are within
// that of the events.
const pollInterval = 50 * time.Millisecond

// poll calls cond until it returns true or an error, ctx ends, or limit
// passes.
func poll(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("the run's deadline passed: %w", context.Cause(parent))
			}
			return fmt.Errorf("after %v: %w", limit, ErrTimeout)
		case <-t.C:
		}
	}
}
