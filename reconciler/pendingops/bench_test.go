package pendingops

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Reproduce:
//
//	go test -run '^$' -bench . ./reconciler/pendingops
//
// Each benchmark keeps N failed entries outstanding (distinct volumes, long
// backoff) and measures one Run of a fresh key plus its completion. The
// linear baseline is the kubelet's algorithm — one slice scanned under one
// lock — written here with the same semantics.

type runner interface {
	Run(ctx context.Context, key Key, name OpName, fn func(context.Context) error, done func(error)) error
}

func benchRunComplete(b *testing.B, r runner, fail func(Key)) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("outstanding=%d", n), func(b *testing.B) {
			for i := range n {
				fail(Key{Volume: fmt.Sprintf("failed-%d", i), Pod: "p"})
			}
			done := make(chan error, 1)
			ok := func(context.Context) error { return nil }
			key := Key{Volume: "hot", Pod: "p"}
			report := func(err error) { done <- err }
			for b.Loop() {
				if err := r.Run(context.Background(), key, OpMount, ok, report); err != nil {
					b.Fatal(err)
				}
				<-done
			}
		})
	}
}

func BenchmarkRunComplete(b *testing.B) {
	b.Run("indexed", func(b *testing.B) {
		var ops *Operations
		benchRunComplete(b, runnerFunc(func(ctx context.Context, key Key, name OpName, fn func(context.Context) error, done func(error)) error {
			return ops.Run(ctx, key, name, fn, done)
		}), func(k Key) {
			if ops == nil || k.Volume == "failed-0" {
				ops = New(Options{InitialBackoff: time.Hour, MaxBackoff: time.Hour})
			}
			// What a failed Run leaves, without a goroutine per entry.
			e := &entry{key: k, name: OpMount, lastErr: errBoom, lastTime: time.Now(), backoff: time.Hour, heapIdx: -1}
			e.dropAt = e.lastTime.Add(2 * time.Hour)
			ops.insert(e)
			ops.pushExpiry(e)
		})
	})
	b.Run("linear-baseline", func(b *testing.B) {
		var ops *linearOps
		benchRunComplete(b, runnerFunc(func(ctx context.Context, key Key, name OpName, fn func(context.Context) error, done func(error)) error {
			return ops.Run(ctx, key, name, fn, done)
		}), func(k Key) {
			if ops == nil || k.Volume == "failed-0" {
				ops = &linearOps{}
			}
			ops.ops = append(ops.ops, linearOp{key: k, name: OpMount, lastTime: time.Now(), backoff: time.Hour})
		})
	})
}

type runnerFunc func(ctx context.Context, key Key, name OpName, fn func(context.Context) error, done func(error)) error

func (f runnerFunc) Run(ctx context.Context, key Key, name OpName, fn func(context.Context) error, done func(error)) error {
	return f(ctx, key, name, fn, done)
}

// linearOps is the kubelet's nestedPendingOperations reduced to what the
// benchmark exercises: a slice of operations scanned linearly under one
// lock, with the same matching rules.
type linearOps struct {
	mu  sync.Mutex
	ops []linearOp
}

type linearOp struct {
	key      Key
	name     OpName
	pending  bool
	lastTime time.Time
	backoff  time.Duration
}

func (l *linearOps) exists(key Key) (bool, int) {
	if key.Volume == "" {
		return false, -1
	}
	idx := -1
	for i, op := range l.ops {
		volumeMatch := op.key.Volume == key.Volume
		podMatch := op.key.Pod == "" || key.Pod == "" || op.key.Pod == key.Pod
		nodeMatch := op.key.Node == "" || key.Node == "" || op.key.Node == key.Node
		if volumeMatch && podMatch && nodeMatch {
			if op.pending {
				return true, i
			}
			if idx == -1 || (op.key.Pod == key.Pod && op.key.Node == key.Node) {
				idx = i
			}
		}
	}
	return idx != -1, idx
}

func (l *linearOps) Run(ctx context.Context, key Key, name OpName, fn func(context.Context) error, done func(error)) error {
	l.mu.Lock()
	if ok, i := l.exists(key); ok {
		op := &l.ops[i]
		if op.pending {
			l.mu.Unlock()
			return &AlreadyExistsError{Key: key}
		}
		if op.backoff > 0 && time.Since(op.lastTime) <= op.backoff && op.name == name {
			l.mu.Unlock()
			return &BackoffError{Key: key}
		}
		op.pending, op.key, op.name = true, key, name
	} else {
		l.ops = append(l.ops, linearOp{key: key, name: name, pending: true})
	}
	l.mu.Unlock()
	go func() {
		err := fn(ctx)
		l.mu.Lock()
		for i := range l.ops {
			if l.ops[i].key == key {
				if err == nil {
					l.ops = append(l.ops[:i], l.ops[i+1:]...)
				} else {
					l.ops[i].pending, l.ops[i].lastTime, l.ops[i].backoff = false, time.Now(), time.Hour
				}
				break
			}
		}
		l.mu.Unlock()
		done(err)
	}()
	return nil
}
