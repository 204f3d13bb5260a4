package pendingops

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

var errBoom = errors.New("boom")

type harness struct {
	t     *testing.T
	clock *testclock.FakeClock
	ops   *Operations
}

func newHarness(t *testing.T) *harness {
	c := testclock.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	return &harness{t: t, clock: c, ops: New(Options{Clock: c})}
}

// gate is an operation that runs until released, then returns err.
type gate struct {
	started chan struct{}
	release chan error
	done    chan error
}

func (h *harness) start(key Key, name OpName) (*gate, error) {
	g := &gate{started: make(chan struct{}), release: make(chan error, 1), done: make(chan error, 1)}
	err := h.ops.Run(context.Background(), key, name, func(context.Context) error {
		close(g.started)
		return <-g.release
	}, func(err error) { g.done <- err })
	if err == nil {
		<-g.started
	}
	return g, err
}

func (h *harness) mustStart(key Key, name OpName) *gate {
	h.t.Helper()
	g, err := h.start(key, name)
	if err != nil {
		h.t.Fatalf("Run(%s, %s) = %v; want started", key, name, err)
	}
	return g
}

// finish releases g with err and waits until its bookkeeping is done.
func (g *gate) finish(err error) {
	g.release <- err
	<-g.done
}

func (h *harness) wantAlreadyExists(key Key, name OpName) {
	h.t.Helper()
	_, err := h.start(key, name)
	var ae *AlreadyExistsError
	if !errors.Is(err, ErrAlreadyExists) || !errors.As(fmt.Errorf("wrapped: %w", err), &ae) {
		h.t.Fatalf("Run(%s, %s) = %v; want ErrAlreadyExists", key, name, err)
	}
}

func (h *harness) wantBackoff(key Key, name OpName) *BackoffError {
	h.t.Helper()
	_, err := h.start(key, name)
	var be *BackoffError
	if !errors.Is(err, ErrBackoff) || !errors.As(fmt.Errorf("wrapped: %w", err), &be) {
		h.t.Fatalf("Run(%s, %s) = %v; want ErrBackoff", key, name, err)
	}
	return be
}

var (
	volPod  = Key{Volume: "v", Pod: "p1"}
	volPod2 = Key{Volume: "v", Pod: "p2"}
	volWide = Key{Volume: "v"}
)

func TestSingleOperation(t *testing.T) {
	h := newHarness(t)
	g := h.mustStart(volPod, OpMount)
	if !h.ops.IsPending(volPod) || h.ops.IsSafeToRetry(volPod, OpMount) {
		t.Error("a running operation is not pending")
	}
	g.finish(nil)
	if h.ops.IsPending(volPod) || h.ops.Len() != 0 {
		t.Error("a successful operation left an entry")
	}
}

func TestSecondOperationBeforeFirstCompletes(t *testing.T) {
	h := newHarness(t)
	g := h.mustStart(volPod, OpMount)
	h.wantAlreadyExists(volPod, OpMount)
	h.wantAlreadyExists(volPod, OpUnmount) // another operation name too
	g.finish(nil)
}

func TestSameKeyAfterSuccess(t *testing.T) {
	h := newHarness(t)
	h.mustStart(volPod, OpMount).finish(nil)
	h.mustStart(volPod, OpMount).finish(nil)
}

func TestBackoff(t *testing.T) {
	h := newHarness(t)
	h.mustStart(volPod, OpMount).finish(errBoom)
	be := h.wantBackoff(volPod, OpMount)
	if be.Duration != 500*time.Millisecond || !errors.Is(be.LastError, errBoom) || !strings.Contains(be.Error(), "boom") {
		t.Errorf("backoff = %+v; want 500ms after boom", be)
	}
	if h.ops.IsSafeToRetry(volPod, OpMount) || !h.ops.IsSafeToRetry(volPod, OpUnmount) {
		t.Error("IsSafeToRetry disagrees with Run")
	}
	h.clock.Step(500 * time.Millisecond) // exactly at expiry: still backing off (<=)
	h.wantBackoff(volPod, OpMount)
	h.clock.Step(time.Millisecond)
	// After expiry it runs; the next failure doubles the backoff.
	h.mustStart(volPod, OpMount).finish(errBoom)
	if be := h.wantBackoff(volPod, OpMount); be.Duration != time.Second {
		t.Errorf("second backoff = %s; want 1s", be.Duration)
	}
	// Doubling is capped at 2m2s.
	for range 12 {
		h.clock.Step(3 * time.Minute)
		h.mustStart(volPod, OpMount).finish(errBoom)
	}
	if be := h.wantBackoff(volPod, OpMount); be.Duration != 2*time.Minute+2*time.Second {
		t.Errorf("capped backoff = %s; want 2m2s", be.Duration)
	}
	// Success clears the entry, and the backoff with it.
	h.clock.Step(3 * time.Minute)
	h.mustStart(volPod, OpMount).finish(nil)
	h.mustStart(volPod, OpMount).finish(errBoom)
	if be := h.wantBackoff(volPod, OpMount); be.Duration != 500*time.Millisecond {
		t.Errorf("backoff after a success = %s; want 500ms", be.Duration)
	}
}

func TestDifferentOperationNameDuringBackoff(t *testing.T) {
	h := newHarness(t)
	h.mustStart(volPod, OpMount).finish(errBoom)
	h.wantBackoff(volPod, OpMount)
	// A different operation resets the backoff and runs.
	h.mustStart(volPod, OpUnmount).finish(errBoom)
	if be := h.wantBackoff(volPod, OpUnmount); be.Duration != 500*time.Millisecond {
		t.Errorf("backoff after the name change = %s; want 500ms (reset)", be.Duration)
	}
	// ...and now mount is the different one.
	h.mustStart(volPod, OpMount).finish(nil)
}

func TestWildcardPodVersusSpecificPod(t *testing.T) {
	t.Run("volume-wide pending blocks per-pod", func(t *testing.T) {
		h := newHarness(t)
		g := h.mustStart(volWide, opUnmountDevice)
		h.wantAlreadyExists(volPod, OpMount)
		h.wantAlreadyExists(volPod2, OpUnmount)
		g.finish(nil)
		h.mustStart(volPod, OpMount).finish(nil)
	})
	t.Run("per-pod pending blocks volume-wide", func(t *testing.T) {
		h := newHarness(t)
		g := h.mustStart(volPod, OpMount)
		h.wantAlreadyExists(volWide, opUnmountDevice)
		// Another pod on the same volume is independent.
		h.mustStart(volPod2, OpMount).finish(nil)
		g.finish(nil)
		h.mustStart(volWide, opUnmountDevice).finish(nil)
	})
	t.Run("other volumes are independent", func(t *testing.T) {
		h := newHarness(t)
		g := h.mustStart(volWide, opUnmountDevice)
		h.mustStart(Key{Volume: "w", Pod: "p1"}, OpMount).finish(nil)
		g.finish(nil)
	})
	t.Run("nodes as wildcards", func(t *testing.T) {
		h := newHarness(t)
		g := h.mustStart(Key{Volume: "v", Node: "n1"}, OpMount)
		h.wantAlreadyExists(Key{Volume: "v"}, OpMount)
		h.wantAlreadyExists(Key{Volume: "v", Pod: "p", Node: "n1"}, OpMount)
		h.mustStart(Key{Volume: "v", Node: "n2"}, OpMount).finish(nil)
		g.finish(nil)
	})
}

func TestEmptyVolumeNameAlwaysRuns(t *testing.T) {
	h := newHarness(t)
	k := Key{Pod: "p1"}
	g1 := h.mustStart(k, OpMount)
	g2 := h.mustStart(k, OpMount)
	if h.ops.IsPending(k) {
		t.Error("an empty volume name matched")
	}
	g1.finish(errBoom)
	g2.finish(nil)
	h.mustStart(k, OpMount).finish(nil) // no backoff kept
	if h.ops.Len() != 0 {
		t.Errorf("Len = %d; want 0", h.ops.Len())
	}
}

func TestPendingMatchBeatsNonPending(t *testing.T) {
	h := newHarness(t)
	// A failed per-pod entry and a pending one for another pod: a
	// volume-wide Run must see the pending one.
	h.mustStart(volPod, OpMount).finish(errBoom)
	g := h.mustStart(volPod2, OpMount)
	_, err := h.start(volWide, OpMount)
	var ae *AlreadyExistsError
	if !errors.As(err, &ae) || ae.Pending != volPod2 {
		t.Fatalf("Run(volume-wide) = %v; want blocked by the pending %s", err, volPod2)
	}
	g.finish(nil)
}

// TestFailedWildcardEntryIsReused: a failed volume-wide entry is taken
// over by the next per-pod operation on the volume (the kubelet rewrites
// the entry's key), keeping its backoff for the same operation name.
func TestFailedWildcardEntryIsReused(t *testing.T) {
	h := newHarness(t)
	h.mustStart(volWide, OpMount).finish(errBoom)
	h.wantBackoff(volPod, OpMount) // (v, p1) matches the failed (v, "")
	h.clock.Step(time.Second)
	h.mustStart(volPod, OpMount).finish(errBoom)
	if be := h.wantBackoff(volPod, OpMount); be.Duration != time.Second {
		t.Errorf("backoff = %s; want 1s (the reused entry doubled)", be.Duration)
	}
	if h.ops.Len() != 1 {
		t.Errorf("Len = %d; want 1 (one entry, re-keyed)", h.ops.Len())
	}
}

// TestExactMatchBeatsWildcard builds, white-box, a failed wildcard entry
// (v, "") for unmount beside a failed exact entry (v, p1) for mount: a key
// (v, p1) must be judged by the exact entry.
func TestExactMatchBeatsWildcard(t *testing.T) {
	h := newHarness(t)
	now := h.clock.Now()
	for _, e := range []*entry{
		{key: volWide, name: OpUnmount, lastErr: errBoom, lastTime: now, backoff: time.Minute, heapIdx: -1},
		{key: volPod, name: OpMount, lastErr: errBoom, lastTime: now, backoff: time.Minute, heapIdx: -1},
	} {
		h.ops.insert(e)
	}
	h.wantBackoff(volPod, OpMount)
	if !h.ops.IsSafeToRetry(volPod, OpUnmount) {
		t.Error("IsSafeToRetry(v/p1, unmount) = false: the wildcard entry was preferred over the exact one")
	}
	// For the volume-wide key, (v, "") is the exact one.
	h.wantBackoff(volWide, OpUnmount)
	if !h.ops.IsSafeToRetry(volWide, OpMount) {
		t.Error("IsSafeToRetry(v, mount) = false: the per-pod entry was preferred over the exact one")
	}
	// With specific pod and node, every candidate is one of four keys.
	h.ops.insert(&entry{key: Key{Volume: "w", Pod: "p", Node: "n"}, name: OpMount, lastErr: errBoom, lastTime: now, backoff: time.Minute, heapIdx: -1})
	h.ops.insert(&entry{key: Key{Volume: "w", Node: "n"}, name: OpUnmount, lastErr: errBoom, lastTime: now, backoff: time.Minute, heapIdx: -1})
	if !h.ops.IsSafeToRetry(Key{Volume: "w", Pod: "p", Node: "n"}, OpUnmount) || h.ops.IsSafeToRetry(Key{Volume: "w", Pod: "p", Node: "n"}, OpMount) {
		t.Error("exact (w, p, n) entry not preferred")
	}
}

func TestWaitIgnoresFailedEntries(t *testing.T) {
	h := newHarness(t)
	h.mustStart(volPod, OpMount).finish(errBoom)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.ops.Wait(ctx); err != nil {
		t.Fatalf("Wait with only a failed entry = %v", err)
	}
	g := h.mustStart(volPod2, OpMount)
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := h.ops.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a pending operation = %v; want deadline", err)
	}
	go g.finish(nil)
	if err := h.ops.Wait(ctx); err != nil {
		t.Fatalf("Wait after completion = %v", err)
	}
}

func TestPanicIsTheError(t *testing.T) {
	h := newHarness(t)
	done := make(chan error, 1)
	err := h.ops.Run(context.Background(), volPod, OpUnmount, func(context.Context) error { panic(errBoom) }, func(err error) { done <- err })
	if err != nil {
		t.Fatal(err)
	}
	got := <-done
	var pe *PanicError
	if !errors.As(got, &pe) || !errors.Is(got, errBoom) || len(pe.Stack) == 0 {
		t.Fatalf("done(%v); want a *PanicError wrapping boom", got)
	}
	h.wantBackoff(volPod, OpUnmount) // a panic is a failure
}

func TestFailedEntriesAreDropped(t *testing.T) {
	h := newHarness(t)
	h.ops = New(Options{Clock: h.clock, ForgetAfter: time.Minute})
	h.mustStart(volPod, OpMount).finish(errBoom)
	h.mustStart(volPod2, OpMount).finish(errBoom)
	h.clock.Step(500*time.Millisecond + time.Minute - time.Millisecond)
	if n := h.ops.Len(); n != 2 {
		t.Fatalf("Len before expiry = %d; want 2", n)
	}
	h.clock.Step(time.Millisecond)
	if n := h.ops.Len(); n != 0 {
		t.Fatalf("Len after backoff + ForgetAfter = %d; want 0", n)
	}
	// Forget drops a pod's failed entries at once, leaving others.
	h.mustStart(volPod, OpMount).finish(errBoom)
	h.mustStart(volPod2, OpMount).finish(errBoom)
	g := h.mustStart(Key{Volume: "v", Pod: "p3"}, OpMount)
	h.ops.Forget("v", "p1")
	h.ops.Forget("v", "p3") // pending: kept
	if h.ops.Len() != 2 || !h.ops.IsSafeToRetry(volPod, OpMount) || h.ops.IsSafeToRetry(volPod2, OpMount) {
		t.Errorf("after Forget(v, p1): Len %d", h.ops.Len())
	}
	g.finish(nil)
}

// TestStressOneOperationPerKey: 10,000 keys, several goroutines starting
// operations concurrently with random failures and a real clock; no key may
// ever have two operations running at once, and per-pod and volume-wide
// operations on one volume must exclude each other.
func TestStressOneOperationPerKey(t *testing.T) {
	const volumes, pods = 2500, 4 // 10,000 per-pod keys, plus volume-wide keys
	ops := New(Options{InitialBackoff: time.Microsecond, MaxBackoff: 10 * time.Microsecond})
	running := make([]atomic.Int32, volumes*(pods+1))
	var violations, started atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 20000 {
				v := r.IntN(volumes)
				p := r.IntN(pods + 1) // pods == volume-wide
				key := Key{Volume: fmt.Sprint("vol", v)}
				if p < pods {
					key.Pod = fmt.Sprint("pod", p)
				}
				err := ops.Run(context.Background(), key, OpMount, func(context.Context) error {
					started.Add(1)
					slot := v * (pods + 1)
					if n := running[slot+p].Add(1); n != 1 {
						violations.Add(1)
					}
					// Volume-wide excludes every pod of the volume.
					busy := 0
					for i := range pods + 1 {
						if running[slot+i].Load() > 0 {
							busy++
						}
					}
					if p == pods && busy > 1 {
						violations.Add(1)
					}
					if r := rand.IntN(4); r == 0 {
						time.Sleep(time.Microsecond)
					}
					running[slot+p].Add(-1)
					if rand.IntN(3) == 0 {
						return errBoom
					}
					return nil
				}, nil)
				if err != nil && !errors.Is(err, ErrAlreadyExists) && !errors.Is(err, ErrBackoff) {
					t.Errorf("Run = %v", err)
				}
			}
		})
	}
	wg.Wait()
	if err := ops.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if violations.Load() != 0 {
		t.Fatalf("%d times two operations overlapped on one key", violations.Load())
	}
	if started.Load() < 10000 {
		t.Errorf("only %d operations started", started.Load())
	}
	t.Logf("%d operations started", started.Load())
}

// opUnmountDevice is an operation name of the kubelet's that nodevol's
// reconciler does not use.
const opUnmountDevice OpName = "unmount_device"

// TestEqualMatchesChooseAsTheKubelet: after failed {v,p1,a} and {v,p2,b},
// a volume-wide Run(v, "", a) matches both; the kubelet scans its list and
// takes the first, {v,p1,a}, so the answer is a backoff — every time, not
// whatever map order gives (it differed in about one run in eight).
func TestEqualMatchesChooseAsTheKubelet(t *testing.T) {
	for i := range 5000 {
		h := newHarness(t)
		h.mustStart(Key{Volume: "v", Pod: "p1"}, "a").finish(errBoom)
		h.mustStart(Key{Volume: "v", Pod: "p2"}, "b").finish(errBoom)
		_, err := h.start(volWide, "a")
		if !errors.Is(err, ErrBackoff) {
			t.Fatalf("run %d: Run(v, \"\", a) = %v; want the backoff of {v,p1,a}, the first matching entry", i, err)
		}
	}
}

// TestEqualMatchesAfterRemoval: the kubelet removes an entry by moving its
// list's last entry into the gap, so after {w} succeeds, {v,p2,b} (last)
// comes before {v,p1,a}, and Run(v, "", a) finds {v,p2,b}: a different
// operation, which resets the backoff and runs.
func TestEqualMatchesAfterRemoval(t *testing.T) {
	for i := range 2000 {
		h := newHarness(t)
		w := h.mustStart(Key{Volume: "w"}, "a")
		h.mustStart(Key{Volume: "v", Pod: "p1"}, "a").finish(errBoom)
		h.mustStart(Key{Volume: "v", Pod: "p2"}, "b").finish(errBoom)
		w.finish(nil)
		g, err := h.start(volWide, "a")
		if err != nil {
			t.Fatalf("run %d: Run(v, \"\", a) = %v; want started on {v,p2,b}, first in the kubelet's list", i, err)
		}
		g.finish(nil)
		if !h.ops.IsSafeToRetry(Key{Volume: "v", Pod: "p2"}, "b") || h.ops.IsSafeToRetry(Key{Volume: "v", Pod: "p1"}, "a") {
			t.Fatalf("run %d: the run did not take over {v,p2,b}", i)
		}
	}
}

func TestEntries(t *testing.T) {
	h := newHarness(t)
	w := h.mustStart(Key{Volume: "w"}, "a")
	h.mustStart(Key{Volume: "v", Pod: "p1"}, "a").finish(errBoom)
	h.mustStart(Key{Volume: "v", Pod: "p2"}, "b").finish(errBoom)
	noVolume := h.mustStart(Key{Pod: "p3"}, "c") // empty volume: no entry
	defer noVolume.finish(nil)
	got := h.ops.Entries()
	want := []Entry{
		{Key: Key{Volume: "w"}, Op: "a", Pending: true},
		{Key: Key{Volume: "v", Pod: "p1"}, Op: "a", LastError: errBoom, RetryAfter: h.clock.Now().Add(DefaultInitialBackoff)},
		{Key: Key{Volume: "v", Pod: "p2"}, Op: "b", LastError: errBoom, RetryAfter: h.clock.Now().Add(DefaultInitialBackoff)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Entries() = %v\nwant %v", got, want)
	}
	w.finish(nil) // the last entry takes the gap
	got = h.ops.Entries()
	if len(got) != 2 || got[0].Key.Pod != "p2" || got[1].Key.Pod != "p1" {
		t.Fatalf("after removal Entries() = %v; want p2 then p1", got)
	}
	h.clock.Step(DefaultInitialBackoff + DefaultForgetAfter + time.Second)
	if got := h.ops.Entries(); len(got) != 0 {
		t.Fatalf("after ForgetAfter Entries() = %v; want none", got)
	}
}
