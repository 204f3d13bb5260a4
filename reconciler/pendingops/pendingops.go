// Package pendingops runs volume operations so that at most one runs per
// key, with exponential backoff after failures — the kubelet's "nested
// pending operations", with the same matching rules, indexed so that each
// Run and completion costs O(1) whatever the number of outstanding keys,
// and with failed entries that do not live forever.
//
// A Key is (volume, pod, node). When looking for an operation that blocks
// a new one:
//
//   - an empty volume matches nothing: the operation always runs;
//   - an empty pod (or node), on either side, matches any pod (or node):
//     a volume-wide operation (pod "") excludes every per-pod operation on
//     the volume, and the reverse;
//   - a pending match wins; among finished (failed) matches an exact key
//     beats a wildcard one;
//   - among equal matches (say failed {v,p1} and {v,p2} for a volume-wide
//     key {v}) the first in list order wins, the list kept as the kubelet
//     keeps its own: a new entry goes last, and a removed entry's place is
//     taken by the last one. So the choice is deterministic, and it is the
//     kubelet's whenever both hold the same entries (they differ once
//     pendingops has forgotten an entry the kubelet keeps, or around
//     operations with an empty volume, which the kubelet lists and
//     pendingops does not).
//
// Run returns an *AlreadyExistsError when a matching operation is pending,
// and a *BackoffError when the matching entry last failed with the same
// operation name less than its backoff ago (500 ms doubling to 2m2s by
// default). A different operation name resets the backoff. A successful
// run removes its entry; a failed entry is dropped once its backoff has
// expired and it has stayed idle for Options.ForgetAfter, or when Forget is
// called for its pod.
package pendingops

import (
	"container/heap"
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Key identifies what an operation works on.
type Key struct {
	Volume string
	Pod    string
	Node   string
}

func (k Key) String() string {
	return fmt.Sprintf("{volume %q, pod %q, node %q}", k.Volume, k.Pod, k.Node)
}

// OpName names an operation kind; backoff is kept per (key, OpName). Any
// name may be used (an adapter passes the kubelet's own).
type OpName string

// The operation names nodevol's reconciler uses.
const (
	OpMount   OpName = "mount"
	OpUnmount OpName = "unmount"
)

// Defaults match the kubelet.
const (
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 2*time.Minute + 2*time.Second
	DefaultForgetAfter    = 10 * time.Minute
)

// Options configure Operations. Zero fields take the defaults.
type Options struct {
	Clock          clock.Clock // real time when nil
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// ForgetAfter is how long a failed entry stays after its backoff has
	// expired before it is dropped (the kubelet keeps them forever).
	ForgetAfter time.Duration
	// NoBackoff removes failed entries at once (no backoff), like the
	// kubelet's exponentialBackOffOnError=false.
	NoBackoff bool
}

// entry is one operation slot: pending, or failed and backing off.
type entry struct {
	key      Key
	name     OpName
	pending  bool
	lastErr  error
	lastTime time.Time
	backoff  time.Duration // 0: never failed
	dropAt   time.Time     // when a failed entry may be dropped
	heapIdx  int           // index in the expiry heap, -1 when not there
	pos      int           // index in Operations.order, -1 when not there
}

// volumeOps holds one volume's entries by (pod, node).
type volumeOps struct {
	ops      map[podNode]*entry
	npending int
}

type podNode struct{ pod, node string }

// Operations is the set of pending and failed operations. Its methods are
// safe for concurrent use.
type Operations struct {
	opts  Options
	clock clock.Clock

	mu      sync.Mutex
	volumes map[string]*volumeOps
	// order lists every indexed entry as the kubelet lists its operations:
	// a new entry is appended, and a removed one's place is taken by the
	// last entry. Among equal matches find picks the first in this order,
	// which is the one the kubelet's linear scan finds first.
	order  []*entry
	npend  int
	idle   chan struct{} // closed while nothing is pending
	expiry expiryHeap
}

// New returns an empty set.
func New(opts Options) *Operations {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = DefaultInitialBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.ForgetAfter <= 0 {
		opts.ForgetAfter = DefaultForgetAfter
	}
	idle := make(chan struct{})
	close(idle)
	return &Operations{opts: opts, clock: opts.Clock, volumes: map[string]*volumeOps{}, idle: idle}
}

// find returns the entry that blocks or carries the backoff for key, as
// the kubelet's isOperationExists decides: a pending match wins; among
// non-pending matches, the exact key beats a wildcard one; otherwise the
// first match in list order (see order) wins, so equal matches always give
// the same answer, and the kubelet's. The lookup touches only key.Volume's
// entries: with a specific pod and node every candidate is one of four map
// lookups, and only a query with an empty pod or node ranges over that
// volume's entries (never over other volumes').
func (o *Operations) find(key Key) *entry {
	if key.Volume == "" {
		return nil
	}
	v := o.volumes[key.Volume]
	if v == nil {
		return nil
	}
	exactKey := podNode{key.Pod, key.Node}
	var pending, exact, first *entry
	consider := func(e *entry) {
		if e == nil || !((e.key.Pod == "" || key.Pod == "" || e.key.Pod == key.Pod) &&
			(e.key.Node == "" || key.Node == "" || e.key.Node == key.Node)) {
			return
		}
		switch {
		case e.pending:
			if pending == nil || e.pos < pending.pos {
				pending = e
			}
		case e.key.Pod == key.Pod && e.key.Node == key.Node:
			exact = e
		case first == nil || e.pos < first.pos:
			first = e
		}
	}
	if key.Pod != "" && key.Node != "" {
		// Every possible match is one of four keys.
		for _, pn := range [...]podNode{exactKey, {key.Pod, ""}, {"", key.Node}, {"", ""}} {
			consider(v.ops[pn])
		}
	} else {
		if e := v.ops[exactKey]; e != nil && v.npending == 0 {
			return e // nothing pending: the exact entry wins outright
		}
		for _, e := range v.ops {
			consider(e)
		}
	}
	switch {
	case pending != nil:
		return pending
	case exact != nil:
		return exact
	}
	return first
}

// Run starts fn in its own goroutine as operation name on key, unless a
// matching operation is pending (*AlreadyExistsError) or the matching entry
// is backing off from a failure of the same operation (*BackoffError).
// fn's error (or its panic, as a *PanicError) decides the backoff; done, if
// not nil, is called with it after the bookkeeping, from fn's goroutine.
func (o *Operations) Run(ctx context.Context, key Key, name OpName, fn func(context.Context) error, done func(error)) error {
	o.mu.Lock()
	now := o.clock.Now()
	o.dropExpired(now)
	e := o.find(key)
	switch {
	case e == nil:
		e = &entry{key: key, name: name, heapIdx: -1, pos: -1}
		o.insert(e)
	case e.pending:
		// Built before the unlock: e's key and name change under o.mu.
		err := &AlreadyExistsError{Key: key, Op: name, Pending: e.key, PendingOp: e.name}
		o.mu.Unlock()
		return err
	default:
		if e.backoff > 0 && !now.After(e.lastTime.Add(e.backoff)) {
			if e.name == name {
				err := &BackoffError{Key: key, Op: name, LastError: e.lastErr, LastTime: e.lastTime, Duration: e.backoff}
				o.mu.Unlock()
				return err
			}
			// A different operation: its own backoff starts from scratch.
			e.backoff, e.lastErr, e.lastTime = 0, nil, time.Time{}
		}
		e.name = name
		if e.key != key && key.Volume != "" {
			o.rekey(e, key)
		}
	}
	if key.Volume != "" {
		o.markPending(e)
	} else {
		o.npend++
		o.ensureBusy()
	}
	o.mu.Unlock()

	go func() {
		err := runRecovering(ctx, fn)
		o.complete(e, err)
		if done != nil {
			done(err)
		}
	}()
	return nil
}

func runRecovering(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn(ctx)
}

func (o *Operations) complete(e *entry, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.key.Volume == "" { // never indexed: always runs, leaves nothing
		o.npend--
		o.maybeIdle()
		return
	}
	o.unmarkPending(e)
	if err == nil || o.opts.NoBackoff {
		o.remove(e)
		return
	}
	if e.backoff == 0 {
		e.backoff = o.opts.InitialBackoff
	} else {
		e.backoff = min(2*e.backoff, o.opts.MaxBackoff)
	}
	e.lastErr = err
	e.lastTime = o.clock.Now()
	e.dropAt = e.lastTime.Add(e.backoff + o.opts.ForgetAfter)
	o.pushExpiry(e)
}

// IsPending reports whether an operation matching key is running.
func (o *Operations) IsPending(key Key) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.find(key)
	return e != nil && e.pending
}

// IsSafeToRetry reports whether Run(key, name) would start now: no
// matching operation is pending and no matching entry is backing off from
// a failure of name.
func (o *Operations) IsSafeToRetry(key Key, name OpName) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.find(key)
	switch {
	case e == nil:
		return true
	case e.pending:
		return false
	}
	return !(e.backoff > 0 && !o.clock.Now().After(e.lastTime.Add(e.backoff)) && e.name == name)
}

// LastError returns when the entry matching key may be retried and the
// error of its last failed run; a zero time and nil when there is none.
func (o *Operations) LastError(key Key) (retryAfter time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e := o.find(key); e != nil && e.lastErr != nil {
		return e.lastTime.Add(e.backoff), e.lastErr
	}
	return time.Time{}, nil
}

// Forget drops the failed (non-pending) entries of volume for pod, on any
// node: the pod is gone, its backoff no longer matters.
func (o *Operations) Forget(volume, pod string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := o.volumes[volume]
	if v == nil {
		return
	}
	for pn, e := range v.ops {
		if pn.pod == pod && !e.pending {
			o.remove(e)
		}
	}
}

// Wait blocks until no operation is pending (failed entries do not count)
// or ctx is done.
func (o *Operations) Wait(ctx context.Context) error {
	o.mu.Lock()
	idle := o.idle
	o.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Len returns the number of entries, pending and failed.
func (o *Operations) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropExpired(o.clock.Now())
	n := 0
	for _, v := range o.volumes {
		n += len(v.ops)
	}
	return n
}

// Entry describes one entry as Entries reports it.
type Entry struct {
	Key       Key
	Op        OpName // the operation that last ran (or runs) on Key
	Pending   bool   // running now
	LastError error  // the last failure; nil when it has not failed
	// RetryAfter is when Op may run again on Key; zero when it has not
	// failed.
	RetryAfter time.Time
}

// Entries returns a snapshot of the entries, pending and failed, in list
// order: the order in which equal matches are chosen (see the package
// doc). Operations with an empty volume are not listed (they leave no
// entry). It is for adapters that must expose their state, such as the
// kubelet module's shim for upstream's tests, and for debugging: it costs
// O(n), and nothing should be decided on a snapshot that may be stale by
// the time it is read.
func (o *Operations) Entries() []Entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropExpired(o.clock.Now())
	out := make([]Entry, 0, len(o.order))
	for _, e := range o.order {
		ent := Entry{Key: e.key, Op: e.name, Pending: e.pending, LastError: e.lastErr}
		if e.lastErr != nil {
			ent.RetryAfter = e.lastTime.Add(e.backoff)
		}
		out = append(out, ent)
	}
	return out
}

func (o *Operations) insert(e *entry) {
	if e.key.Volume == "" {
		return
	}
	v := o.volumes[e.key.Volume]
	if v == nil {
		v = &volumeOps{ops: make(map[podNode]*entry, 1)}
		o.volumes[e.key.Volume] = v
	}
	v.ops[podNode{e.key.Pod, e.key.Node}] = e
	e.pos = len(o.order)
	o.order = append(o.order, e)
}

func (o *Operations) rekey(e *entry, key Key) {
	v := o.volumes[e.key.Volume]
	delete(v.ops, podNode{e.key.Pod, e.key.Node})
	e.key = key
	v.ops[podNode{key.Pod, key.Node}] = e
}

func (o *Operations) remove(e *entry) {
	o.removeExpiry(e)
	v := o.volumes[e.key.Volume]
	if v == nil || v.ops[podNode{e.key.Pod, e.key.Node}] != e {
		return
	}
	delete(v.ops, podNode{e.key.Pod, e.key.Node})
	if len(v.ops) == 0 {
		delete(o.volumes, e.key.Volume)
	}
	if e.pos >= 0 {
		last := o.order[len(o.order)-1]
		o.order[e.pos], last.pos = last, e.pos
		o.order[len(o.order)-1] = nil
		o.order = o.order[:len(o.order)-1]
		e.pos = -1
	}
}

func (o *Operations) markPending(e *entry) {
	o.removeExpiry(e)
	e.pending = true
	o.volumes[e.key.Volume].npending++
	o.npend++
	o.ensureBusy()
}

func (o *Operations) unmarkPending(e *entry) {
	e.pending = false
	o.volumes[e.key.Volume].npending--
	o.npend--
	o.maybeIdle()
}

func (o *Operations) ensureBusy() {
	if o.npend == 1 {
		o.idle = make(chan struct{})
	}
}

func (o *Operations) maybeIdle() {
	if o.npend == 0 {
		close(o.idle)
	}
}

// dropExpired removes failed entries whose backoff expired more than
// ForgetAfter ago. Each entry enters the heap once per failure, so the
// work is amortised O(log n) per failure and O(1) when nothing expires.
func (o *Operations) dropExpired(now time.Time) {
	for len(o.expiry) > 0 && !o.expiry[0].dropAt.After(now) {
		o.remove(o.expiry[0])
	}
}

func (o *Operations) pushExpiry(e *entry) {
	o.removeExpiry(e)
	heap.Push(&o.expiry, e)
}

func (o *Operations) removeExpiry(e *entry) {
	if e.heapIdx >= 0 {
		heap.Remove(&o.expiry, e.heapIdx)
	}
}

type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].dropAt.Before(h[j].dropAt) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.heapIdx = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.heapIdx = -1
	*h = old[:len(old)-1]
	return e
}
