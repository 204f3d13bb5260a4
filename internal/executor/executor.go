// Package executor generates and runs the operations that set volumes up
// and tear them down, through nested pending operations (at most one
// operation per key, exponential backoff after failures), and reports each
// outcome into the actual state of world. It is internal: the reconciler
// runs it, and `nodevol teardown` its TearDown (one place knows the order
// subpaths, plugin check, subpath clean, TearDown). Embedders use
// reconciler.Manager, and pendingops for nested pending operations of
// their own.
package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/reconciler/pendingops"
	"github.com/nodevol/nodevol/volume"
)

// StateUpdater receives the outcome of operations: the actual state of
// world implements it.
type StateUpdater interface {
	MarkMounted(v MountedVolume) error
	// MarkUncertain records that the volume may or may not be mounted
	// (a failed or interrupted SetUp or TearDown): it must be treated as
	// mounted, and torn down again when not wanted.
	MarkUncertain(v MountedVolume, cause error) error
	MarkUnmounted(v MountedVolume) error
}

// MountedVolume identifies one volume of one pod, as the actual state of
// world records it.
type MountedVolume struct {
	VolumeName volume.UniqueVolumeName
	PodUID     string
	// InnerName is the volume's name in the pod spec (its directory name).
	InnerName string
	Plugin    volume.Plugin
	// Spec is the spec the volume was mounted with (or reconstructed).
	Spec *volume.Spec
}

// VolumeToMount is a volume the desired state of world wants for a pod.
type VolumeToMount struct {
	VolumeName volume.UniqueVolumeName
	Pod        *volume.Pod
	Spec       *volume.Spec
	Plugin     volume.Plugin
}

func (v VolumeToMount) mounted() MountedVolume {
	return MountedVolume{VolumeName: v.VolumeName, PodUID: v.Pod.UID, InnerName: v.Spec.Name, Plugin: v.Plugin, Spec: v.Spec}
}

// SubpathCleaner removes a volume's subpath bind mounts before TearDown
// (package subpath provides one). Check returns the error Clean would
// refuse with, changing nothing; plugin is the volume's plugin name.
type SubpathCleaner interface {
	Check(ctx context.Context, podUID, plugin, volume string) error
	Clean(ctx context.Context, podUID, plugin, volume string) error
}

// Hooks observe operations (for metrics). Either may be nil.
type Hooks struct {
	Start  func(op pendingops.OpName, plugin string)
	Finish func(op pendingops.OpName, plugin string, err error, d time.Duration)
}

// Options configure an Executor.
type Options struct {
	Clock clock.PassiveClock // real time when nil
	// Operations may be shared; New makes one when nil.
	Operations *pendingops.Operations
	Subpaths   SubpathCleaner
	Hooks      Hooks
}

// Executor starts operations.
type Executor struct {
	ops      *pendingops.Operations
	clock    clock.PassiveClock
	subpaths SubpathCleaner
	hooks    Hooks
}

// New returns an Executor.
func New(opts Options) *Executor {
	x := &Executor{ops: opts.Operations, clock: opts.Clock, subpaths: opts.Subpaths, hooks: opts.Hooks}
	if x.clock == nil {
		x.clock = clock.RealClock{}
	}
	if x.ops == nil {
		x.ops = pendingops.New(pendingops.Options{})
	}
	return x
}

// Operations returns the executor's pending operations (for IsPending,
// Wait, Forget).
func (x *Executor) Operations() *pendingops.Operations { return x.ops }

// Key is the pending-operations key for a volume of a pod: per pod for
// plugins like emptyDir, volume-wide for device-mountable plugins.
func Key(plugin volume.Plugin, name volume.UniqueVolumeName, podUID string) pendingops.Key {
	if volume.IsDeviceMountable(plugin) {
		podUID = ""
	}
	return pendingops.Key{Volume: string(name), Pod: podUID}
}

// MountVolume starts SetUp of v and reports the result to asw. It returns
// at once: nil when the operation started, or pendingops' already-exists
// or backoff errors (expected, not failures). done, if not nil, receives
// the operation's error (nil on success) when it finishes.
func (x *Executor) MountVolume(ctx context.Context, v VolumeToMount, asw StateUpdater, done func(error)) error {
	mv := v.mounted()
	return x.run(ctx, pendingops.OpMount, mv, func(ctx context.Context) error {
		m, err := v.Plugin.NewMounter(v.Spec, v.Pod)
		if err != nil {
			return fmt.Errorf("new mounter: %w", err)
		}
		if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
			if volume.KindOf(err) == volume.Uncertain {
				err = errors.Join(err, asw.MarkUncertain(mv, err))
			}
			return err
		}
		return asw.MarkMounted(mv)
	}, done)
}

// UnmountVolume starts the teardown of v. Everything that can refuse is
// asked first, changing nothing: the subpath check, then the unmounter's
// own CheckTearDown when it has one. Then the subpath bind mounts are
// cleaned (a failure fails the operation before TearDown runs), then the
// plugin's TearDown runs; on success the volume is marked unmounted, on
// failure uncertain, and the error — with its cause chain, such as a
// nested-mount refusal — goes to done and into the backoff entry.
func (x *Executor) UnmountVolume(ctx context.Context, v MountedVolume, asw StateUpdater, done func(error)) error {
	return x.run(ctx, pendingops.OpUnmount, v, func(ctx context.Context) error {
		err := tearDown(ctx, x.subpaths, v.Plugin, v.PodUID, v.InnerName, func(err error) error {
			return errors.Join(err, asw.MarkUncertain(v, err))
		})
		if err != nil {
			return err
		}
		return asw.MarkUnmounted(v)
	}, done)
}

// SubpathError is a failure of the subpath step of a teardown: Op is
// "check" or "clean". Nothing of the volume was touched.
type SubpathError struct {
	Op  string
	Err error
}

func (e *SubpathError) Error() string { return e.Op + " subpaths: " + e.Err.Error() }

func (e *SubpathError) Unwrap() error { return e.Err }

// TearDown tears down the volume vol of the pod podUID exactly as an
// unmount operation does, but at once, without pending operations or an
// actual state (nodevol teardown runs it on a volume named on the command
// line). Everything that can refuse is asked first, changing nothing: the
// subpath check, then the unmounter's own CheckTearDown when it has one.
// Then the subpath bind mounts are cleaned (a failure, a *SubpathError,
// stops here before anything of the volume is touched), then the
// unmounter's TearDown runs. subpaths may be nil: no subpath step.
func TearDown(ctx context.Context, subpaths SubpathCleaner, plugin volume.Plugin, podUID, vol string) error {
	return tearDown(ctx, subpaths, plugin, podUID, vol, func(err error) error { return err })
}

// tearDown is TearDown; failed receives the unmounter's errors (a refusal
// of CheckTearDown, a failed TearDown), after which the volume may be in
// any state, and returns the error to return.
func tearDown(ctx context.Context, subpaths SubpathCleaner, plugin volume.Plugin, podUID, vol string, failed func(error) error) error {
	name := plugin.Name()
	if subpaths != nil {
		if err := subpaths.Check(ctx, podUID, name, vol); err != nil {
			return &SubpathError{Op: "check", Err: err}
		}
	}
	u, err := plugin.NewUnmounter(vol, podUID)
	if err != nil {
		return fmt.Errorf("new unmounter: %w", err)
	}
	if c, ok := u.(volume.TearDownChecker); ok {
		if err := c.CheckTearDown(ctx); err != nil {
			return failed(err)
		}
	}
	if subpaths != nil {
		if err := subpaths.Clean(ctx, podUID, name, vol); err != nil {
			return &SubpathError{Op: "clean", Err: err}
		}
	}
	if err := u.TearDown(ctx); err != nil {
		return failed(err)
	}
	return nil
}

func (x *Executor) run(ctx context.Context, op pendingops.OpName, v MountedVolume, fn func(context.Context) error, done func(error)) error {
	key := Key(v.Plugin, v.VolumeName, v.PodUID)
	plugin := v.Plugin.Name()
	logger := logr.FromContextOrDiscard(ctx).WithValues("operation", op, "volume", v.VolumeName, "pod", v.PodUID, "plugin", plugin)
	var start time.Time
	return x.ops.Run(ctx, key, op, func(ctx context.Context) error {
		start = x.clock.Now()
		if x.hooks.Start != nil {
			x.hooks.Start(op, plugin)
		}
		logger.V(4).Info("Operation started")
		return fn(logr.NewContext(ctx, logger))
	}, func(err error) {
		d := x.clock.Since(start)
		if x.hooks.Finish != nil {
			x.hooks.Finish(op, plugin, err, d)
		}
		if err != nil {
			logger.V(2).Info("Operation failed", "err", err, "duration", d)
		} else {
			logger.V(4).Info("Operation succeeded", "duration", d)
		}
		if done != nil {
			done(err)
		}
	})
}
