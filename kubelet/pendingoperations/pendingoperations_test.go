package pendingoperations

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/kubernetes/pkg/util/goroutinemap/exponentialbackoff"
	"k8s.io/kubernetes/pkg/volume/util/nestedpendingoperations"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"

	"github.com/nodevol/nodevol/reconciler/pendingops"
)

const vol v1.UniqueVolumeName = "vol"

// op returns an operation that runs until release is closed, then returns
// err as both EventErr and DetailedErr.
func op(name string, release <-chan struct{}, err error) volumetypes.GeneratedOperations {
	return volumetypes.GeneratedOperations{
		OperationName: name,
		OperationFunc: func() volumetypes.OperationContext {
			if release != nil {
				<-release
			}
			return volumetypes.NewOperationContext(err, err, false)
		},
	}
}

// upstreamAlreadyExists is the error upstream's own implementation gives.
func upstreamAlreadyExists(t *testing.T, v v1.UniqueVolumeName, p volumetypes.UniquePodName, n types.NodeName) error {
	t.Helper()
	up := nestedpendingoperations.NewNestedPendingOperations(false)
	release := make(chan struct{})
	defer func() { close(release); up.Wait() }()
	if err := up.Run(v, p, n, op("x", release, nil)); err != nil {
		t.Fatal(err)
	}
	return up.Run(v, p, n, op("x", nil, nil))
}

func TestAlreadyExistsIsUpstreams(t *testing.T) {
	o := New(true)
	release := make(chan struct{})
	if err := o.Run(vol, "pod", "node", op("mount", release, nil)); err != nil {
		t.Fatal(err)
	}
	err := o.Run(vol, "pod", "node", op("mount", nil, nil))
	if !nestedpendingoperations.IsAlreadyExists(err) {
		t.Fatalf("Run = %v (%T); IsAlreadyExists false", err, err)
	}
	if want := upstreamAlreadyExists(t, vol, "pod", "node"); err.Error() != want.Error() || err != want {
		t.Errorf("Run = %#v\nupstream's: %#v", err, want)
	}
	if exponentialbackoff.IsExponentialBackoff(err) {
		t.Error("already-exists error taken for a backoff")
	}
	close(release)
	o.Wait()
}

func TestBackoffIsUpstreams(t *testing.T) {
	o := New(true)
	boom := errors.New("boom")
	before := time.Now()
	if err := o.Run(vol, "pod", "", op("mount", nil, boom)); err != nil {
		t.Fatal(err)
	}
	o.Wait()
	err := o.Run(vol, "pod", "", op("mount", nil, nil))
	if !exponentialbackoff.IsExponentialBackoff(err) || nestedpendingoperations.IsAlreadyExists(err) {
		t.Fatalf("Run = %v (%T); want upstream's exponential backoff error", err, err)
	}
	msg := err.Error()
	for _, want := range []string{`"{volumeName:vol podName:pod nodeName:}"`, "(500ms)", `Last error: "boom"`, before.Format("2006-01-02 15:04")} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	var e pendingops.Entry
	if ents := o.Entries(); len(ents) == 1 {
		e = ents[0]
	}
	if !strings.Contains(msg, e.RetryAfter.Add(-500*time.Millisecond).String()) {
		t.Errorf("message %q does not name the failure time %v", msg, e.RetryAfter.Add(-500*time.Millisecond))
	}
	// Another operation name resets the backoff.
	if err := o.Run(vol, "pod", "", op("unmount", nil, nil)); err != nil {
		t.Errorf("Run(unmount) during mount's backoff = %v", err)
	}
	o.Wait()
}

func TestNoBackoff(t *testing.T) {
	o := New(false)
	if err := o.Run(vol, "", "", op("mount", nil, errors.New("boom"))); err != nil {
		t.Fatal(err)
	}
	o.Wait()
	if n := len(o.Entries()); n != 0 {
		t.Fatalf("%d entries after a failure without backoff", n)
	}
	if err := o.Run(vol, "", "", op("mount", nil, nil)); err != nil {
		t.Fatalf("retry = %v", err)
	}
	o.Wait()
}

// TestCallbacks: EventRecorderFunc sees EventErr, CompleteFunc DetailedErr,
// and DetailedErr alone decides failure.
func TestCallbacks(t *testing.T) {
	for _, tc := range []struct {
		name                string
		eventErr, detailErr error
		wantBackoff         bool
	}{
		{"success", nil, nil, false},
		{"event error only", errors.New("event"), nil, false},
		{"detailed error", errors.New("event"), errors.New("detailed"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := New(true)
			var gotEvent, gotDetail error
			err := o.Run(vol, "pod", "", volumetypes.GeneratedOperations{
				OperationName: "mount",
				OperationFunc: func() volumetypes.OperationContext {
					return volumetypes.NewOperationContext(tc.eventErr, tc.detailErr, false)
				},
				EventRecorderFunc: func(err *error) { gotEvent = *err },
				CompleteFunc:      func(p volumetypes.CompleteFuncParam) { gotDetail = *p.Err },
			})
			if err != nil {
				t.Fatal(err)
			}
			o.Wait()
			if gotEvent != tc.eventErr || gotDetail != tc.detailErr {
				t.Errorf("EventRecorderFunc got %v, CompleteFunc %v; want %v, %v", gotEvent, gotDetail, tc.eventErr, tc.detailErr)
			}
			if got := !o.IsOperationSafeToRetry(vol, "pod", "", "mount"); got != tc.wantBackoff {
				t.Errorf("backing off = %v; want %v", got, tc.wantBackoff)
			}
		})
	}
}

// TestOperationPanicIsAFailure: a panic in OperationFunc is the detailed
// error, so it backs off.
func TestOperationPanicIsAFailure(t *testing.T) {
	o := New(true)
	var detail error
	err := o.Run(vol, "", "", volumetypes.GeneratedOperations{
		OperationName: "mount",
		OperationFunc: func() volumetypes.OperationContext { panic("oops") },
		CompleteFunc:  func(p volumetypes.CompleteFuncParam) { detail = *p.Err },
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Wait()
	// Upstream's GeneratedOperations.Run turns the panic into its result,
	// not into the context CompleteFunc reads.
	if detail != nil {
		t.Errorf("CompleteFunc got %v; want nil, as upstream", detail)
	}
	if o.IsOperationSafeToRetry(vol, "", "", "mount") {
		t.Error("a panicking operation did not back off")
	}
}

// TestEscapedPanicCrashes: a panic in CompleteFunc removes the entry, as
// upstream does, and goes to utilruntime.HandleCrash (which would crash
// the process were ReallyCrash true).
func TestEscapedPanicCrashes(t *testing.T) {
	// Not restored: HandleCrash reads them after the handler has run, at
	// a time the test cannot wait for. No other test of this package
	// reaches HandleCrash.
	crashed := make(chan any, 1)
	utilruntime.ReallyCrash = false
	utilruntime.PanicHandlers = append(utilruntime.PanicHandlers, func(_ context.Context, r any) {
		select {
		case crashed <- r:
		default:
		}
	})

	o := New(true)
	err := o.Run(vol, "", "", volumetypes.GeneratedOperations{
		OperationName: "mount",
		OperationFunc: func() volumetypes.OperationContext {
			return volumetypes.NewOperationContext(nil, errors.New("failed"), false)
		},
		CompleteFunc: func(volumetypes.CompleteFuncParam) { panic("complete") },
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-crashed:
		if r != "complete" {
			t.Errorf("HandleCrash got %v", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("the panic never reached HandleCrash")
	}
	o.Wait()
	if n := len(o.Entries()); n != 0 || !o.IsOperationSafeToRetry(vol, "", "", "mount") {
		t.Errorf("%d entries after the panic; upstream removes the entry", n)
	}
}

// TestChoiceAgreesWithUpstream runs the same sequences on upstream's
// implementation and this one: among equally matching failed entries both
// must pick the same one (upstream: the first in its list).
func TestChoiceAgreesWithUpstream(t *testing.T) {
	type runner interface {
		Run(v1.UniqueVolumeName, volumetypes.UniquePodName, types.NodeName, volumetypes.GeneratedOperations) error
		IsOperationPending(v1.UniqueVolumeName, volumetypes.UniquePodName, types.NodeName) bool
	}
	boom := errors.New("boom")
	// fail runs a failing operation and waits until it has finished.
	fail := func(t *testing.T, r runner, p volumetypes.UniquePodName, name string) {
		if err := r.Run(vol, p, "", op(name, nil, boom)); err != nil {
			t.Fatal(err)
		}
		for r.IsOperationPending(vol, p, "") {
			time.Sleep(time.Millisecond)
		}
	}
	scenarios := map[string]func(t *testing.T, r runner) error{
		"two failed entries": func(t *testing.T, r runner) error {
			fail(t, r, "p1", "a")
			fail(t, r, "p2", "b")
			return r.Run(vol, "", "", op("a", nil, nil))
		},
		"after a removal": func(t *testing.T, r runner) error {
			release := make(chan struct{})
			if err := r.Run("other", "", "", op("a", release, nil)); err != nil {
				t.Fatal(err)
			}
			fail(t, r, "p1", "a")
			fail(t, r, "p2", "b")
			close(release)
			for r.IsOperationPending("other", "", "") {
				time.Sleep(time.Millisecond)
			}
			return r.Run(vol, "", "", op("a", nil, nil))
		},
	}
	for name, scenario := range scenarios {
		t.Run(name, func(t *testing.T) {
			for i := range 50 {
				start := time.Now()
				want := scenario(t, nestedpendingoperations.NewNestedPendingOperations(true).(runner))
				ours := New(true)
				got := scenario(t, ours)
				if time.Since(start) > 400*time.Millisecond {
					continue // a backoff may have expired: not a question of choice
				}
				if exponentialbackoff.IsExponentialBackoff(got) != exponentialbackoff.IsExponentialBackoff(want) || (got == nil) != (want == nil) {
					t.Fatalf("run %d: Run(vol, \"\", a) = %v; upstream's = %v; entries %+v", i, got, want, ours.Entries())
				}
			}
		})
	}
}

// TestAtMostOneAtATime: many goroutines run on overlapping keys of one
// volume (two pods and the volume-wide key); no two matching operations
// ever run at once.
func TestAtMostOneAtATime(t *testing.T) {
	o := New(true)
	var mu sync.Mutex
	running := map[volumetypes.UniquePodName]int{}
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := []volumetypes.UniquePodName{"", "p1", "p2"}[i%3]
			_ = o.Run(vol, pod, "", volumetypes.GeneratedOperations{
				OperationName: "mount",
				OperationFunc: func() volumetypes.OperationContext {
					mu.Lock()
					running[pod]++
					clash := running[""] > 0 && len(running) > 1 && (running["p1"] > 0 || running["p2"] > 0) || running[pod] > 1
					mu.Unlock()
					if clash {
						t.Errorf("operation on pod %q runs beside a matching one", pod)
					}
					time.Sleep(50 * time.Microsecond)
					mu.Lock()
					if running[pod]--; running[pod] == 0 {
						delete(running, pod)
					}
					mu.Unlock()
					return volumetypes.NewOperationContext(nil, nil, false)
				},
			})
		}()
	}
	wg.Wait()
	o.Wait()
}
