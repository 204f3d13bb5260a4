package mountdetect

import (
	"sync"

	"golang.org/x/sys/unix"
)

// The parallel walk shares one LIFO queue of directories to list. A
// directory is opened by the worker that takes it (relative to its
// parent's fd, which stays open while any child is outstanding), so a wide
// directory costs queue entries, not file descriptors; LIFO order keeps the
// set of open directories close to a depth-first frontier. Subtrees deeper
// than the serial walk's fd window are handed to the serial walk, which
// bounds its fds. Every guarantee comes from the same openDir, list and
// finish as the serial walk.

type task struct {
	parent *dirNode
	name   string
	relist *dirNode // set when a directory is listed again after a failed rmdir
}

type taskQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	tasks  []task
	active int // queued or running
}

func (q *taskQueue) push(t task) {
	q.mu.Lock()
	q.tasks = append(q.tasks, t)
	q.active++
	q.mu.Unlock()
	q.cond.Signal()
}

// pop returns the next task, or false once every task has finished.
func (q *taskQueue) pop() (task, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.tasks) == 0 {
		if q.active == 0 {
			return task{}, false
		}
		q.cond.Wait()
	}
	t := q.tasks[len(q.tasks)-1]
	q.tasks[len(q.tasks)-1] = task{}
	q.tasks = q.tasks[:len(q.tasks)-1]
	return t, true
}

func (q *taskQueue) done() {
	q.mu.Lock()
	q.active--
	idle := q.active == 0
	q.mu.Unlock()
	if idle {
		q.cond.Broadcast()
	}
}

func (w *walk) parallel(root *dirNode, workers int) {
	q := &taskQueue{}
	q.cond = sync.NewCond(&q.mu)
	root.pending.Store(1)
	q.push(task{relist: root})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			sc := getScratch()
			defer putScratch(sc)
			for {
				t, ok := q.pop()
				if !ok {
					return
				}
				w.process(q, t, sc)
				q.done()
			}
		})
	}
	wg.Wait()
}

func (w *walk) process(q *taskQueue, t task, sc *scratch) {
	sc.pace()
	n := t.relist
	if n == nil {
		if w.aborted.Load() {
			w.release(q, t.parent)
			return
		}
		n = w.enter(t.parent, t.name)
		if n == nil {
			w.release(q, t.parent)
			return
		}
		if n.depth >= w.maxOpen {
			// Deep chain: the serial walk removes the subtree (and n
			// itself) with a bounded number of open fds.
			w.serial(n, sc)
			w.release(q, t.parent)
			return
		}
		n.pending.Store(1)
	}
	for !w.aborted.Load() && w.list(n, sc, func(name []byte) {
		n.pending.Add(1)
		q.push(task{parent: n, name: string(name)})
	}) {
	}
	w.release(q, n)
}

// release drops one outstanding task of n. When none remain n is finished:
// removed from its parent (or queued to be listed again), closed, and its
// own parent released in turn.
func (w *walk) release(q *taskQueue, n *dirNode) {
	for n.pending.Add(-1) == 0 {
		if !w.aborted.Load() && w.act.done(w, n) {
			n.pending.Store(1)
			q.push(task{relist: n})
			return
		}
		unix.Close(n.fd)
		n.fd = -1
		if n.parent.parent == nil {
			return // n is the start directory
		}
		n = n.parent
	}
}
