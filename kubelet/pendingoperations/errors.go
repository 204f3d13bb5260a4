package pendingoperations

import (
	"fmt"
	"reflect"
	"unsafe"

	"k8s.io/kubernetes/pkg/util/goroutinemap/exponentialbackoff"
	"k8s.io/kubernetes/pkg/volume/util/nestedpendingoperations"

	"github.com/nodevol/nodevol/reconciler/pendingops"
)

// Upstream's IsAlreadyExists and IsExponentialBackoff recognise only their
// own unexported error types (a type switch, not errors.As), so the errors
// Run returns must be those types, made by their exported constructors,
// NewAlreadyExistsError and NewExponentialBackoffError. Their arguments
// cannot be filled from outside in plain Go: the first takes the
// unexported operationKey, the second an ExponentialBackoff whose fields
// are unexported and set only to "now" by its Update method. So the
// arguments are built by reflection, each field set by name; a field that
// a later upstream renames or retypes is left zero (the error is still
// recognised, its message names less), and this package's tests fail on
// it.

var newAlreadyExists = reflect.ValueOf(nestedpendingoperations.NewAlreadyExistsError)

// operationKey returns upstream's operationKey for k.
func operationKey(k pendingops.Key) reflect.Value {
	v := reflect.New(newAlreadyExists.Type().In(0)).Elem()
	setField(v, "volumeName", k.Volume)
	setField(v, "podName", k.Pod)
	setField(v, "nodeName", k.Node)
	return v
}

// setField sets v's field name (exported or not) to x, converted to the
// field's type, when there is such a field and x converts to its type. v
// must be addressable.
func setField(v reflect.Value, name string, x any) {
	f := v.FieldByName(name)
	xv := reflect.ValueOf(x)
	if !f.IsValid() || !xv.IsValid() || !xv.Type().ConvertibleTo(f.Type()) {
		return
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(xv.Convert(f.Type()))
}

// newAlreadyExistsError is upstream's error for Run(k) while a matching
// operation runs.
func newAlreadyExistsError(k pendingops.Key) error {
	err, _ := newAlreadyExists.Call([]reflect.Value{operationKey(k)})[0].Interface().(error)
	return err
}

// newBackoffError is upstream's error for Run(k) while the matching entry
// backs off: it names the key as upstream does (the key printed with %+v)
// and carries the last error, when it happened and the backoff duration.
func newBackoffError(k pendingops.Key, b *pendingops.BackoffError) error {
	var eb exponentialbackoff.ExponentialBackoff
	v := reflect.ValueOf(&eb).Elem()
	setField(v, "lastError", b.LastError)
	setField(v, "lastErrorTime", b.LastTime)
	setField(v, "durationBeforeRetry", b.Duration)
	return exponentialbackoff.NewExponentialBackoffError(fmt.Sprintf("%+v", operationKey(k).Interface()), eb)
}
