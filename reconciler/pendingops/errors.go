package pendingops

import (
	"errors"
	"fmt"
	"time"
)

// ErrAlreadyExists is matched by *AlreadyExistsError: an operation matching
// the key is still running.
var ErrAlreadyExists = errors.New("an operation for this key is already pending")

// ErrBackoff is matched by *BackoffError: the last run of this key with the
// same operation failed less than its backoff ago.
var ErrBackoff = errors.New("operation is in exponential backoff")

// AlreadyExistsError reports the pending operation that blocked Run.
type AlreadyExistsError struct {
	Key       Key    // the key Run was called with
	Op        OpName // the operation Run was asked to start
	Pending   Key    // the pending operation's key (may differ by wildcards)
	PendingOp OpName // the pending operation
}

func (e *AlreadyExistsError) Error() string {
	return fmt.Sprintf("cannot start %s for %s: %v (%s for %s)", e.Op, e.Key, ErrAlreadyExists, e.PendingOp, e.Pending)
}

// Is makes errors.Is(err, ErrAlreadyExists) true.
func (e *AlreadyExistsError) Is(target error) bool { return target == ErrAlreadyExists }

// BackoffError reports why and until when a key is backing off.
type BackoffError struct {
	Key       Key
	Op        OpName
	LastError error     // the failure that started this backoff
	LastTime  time.Time // when it failed
	Duration  time.Duration
}

// RetryAfter is when the key may run this operation again.
func (e *BackoffError) RetryAfter() time.Time { return e.LastTime.Add(e.Duration) }

func (e *BackoffError) Error() string {
	return fmt.Sprintf("operation %s for %s: %v: no retries permitted until %s (durationBeforeRetry %s); last error: %v",
		e.Op, e.Key, ErrBackoff, e.RetryAfter().Format(time.RFC3339Nano), e.Duration, e.LastError)
}

// Is makes errors.Is(err, ErrBackoff) true.
func (e *BackoffError) Is(target error) bool { return target == ErrBackoff }

// PanicError is an operation's panic, recovered and returned as its error.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("operation panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}
