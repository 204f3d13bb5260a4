package mountdetect

import (
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/errlist"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
)

const (
	// defaultMaxOpen bounds the directory fds one serial walk keeps open.
	// Deeper directories are reached again through ".." (verified by device
	// and inode) instead of keeping an fd per level, so trees far deeper
	// than PATH_MAX need neither unbounded fds nor path strings.
	defaultMaxOpen = 128
	// maxPasses bounds how often one directory is listed again after its
	// rmdir found it not empty (entries skipped by a reshuffled directory,
	// golang/go#20841, or created concurrently).
	maxPasses = 64
	// direntBufSize is the getdents64 buffer: tens of thousands of entries
	// a call, so that sorting a batch by inode approaches a full sort.
	direntBufSize = 1 << 20
	// maxBatchSize bounds the buffer one listing batch may grow to for a
	// large directory (see scratch.read): up to ~500,000 entries, which
	// with their 16-byte parsed entries take some 24 MiB per walk goroutine.
	maxBatchSize = 16 << 20
	// maxDirentSize is the longest getdents64 record: the header and a
	// 255-byte name with its NUL, 8-byte aligned.
	maxDirentSize = 280
)

// Test seams: called with a directory's path just before the walk opens it
// and just after, so tests can mount or swap things at exactly those
// moments. Always nil outside tests.
var testHookBeforeEnter, testHookAfterEnter func(path string)

// testHookAfterOpenStart is called with the start path just after the
// start directory is opened (for listing, or O_PATH when it may not be
// listed), before the mount checks. Always nil outside tests.
var testHookAfterOpenStart func(path string)

// dirNode is one directory of a walk: a frame of the serial walk or a node
// of the parallel one.
type dirNode struct {
	parent *dirNode // nil for the pseudo-node holding the start path's parent
	name   string
	// shown is set on the start directory and the pseudo-node above it:
	// the path errors name the start directory by (the caller's, never a
	// /proc/self/fd name).
	shown string
	fd    int // -1 when closed (evicted by a deep serial walk, or not yet opened)
	depth int
	// dev and ino identify the directory when its fd has been evicted, so
	// that reopening it through ".." can prove it is the same directory.
	dev, ino uint64
	// off is the listing position when the fd was evicted, for an action
	// that resumes the listing there (see action.reopened).
	off int64

	// Serial walk state: subdirectories found in the current batch.
	subdirs []string
	next    int
	eof     bool

	progress atomic.Bool // this pass removed something
	kept     atomic.Bool // something was deliberately left here (a mount, an error)
	passes   int
	// gone: listing failed with ENOENT, as for a directory removed (by
	// someone else) since it was opened: it is empty and no longer has a
	// name; whatever its name in the parent shows now is not it (finish
	// verifies that, see stillNamed).
	gone atomic.Bool

	// keptNames are the entries deliberately left here (see keep). A
	// directory reopened through ".." is listed again from offset 0 (a new
	// fd has no position), where those entries reappear: list skips them,
	// or a kept subtree deeper than maxOpen would be walked, and its
	// ancestor evicted and reopened, forever. reopened is only ever set on
	// a node owned by one serial walk, so list reads keptNames unlocked.
	keptMu    sync.Mutex
	keptNames map[string]struct{}
	reopened  bool

	// Parallel walk: outstanding tasks (its own listing plus children).
	pending atomic.Int64
}

// path is the directory's full path, for error messages only: the start
// directory's shown name followed by the names below it.
func (n *dirNode) path() string {
	var names []string
	x := n
	for ; x.shown == ""; x = x.parent {
		names = append(names, x.name)
	}
	if len(names) == 0 {
		return x.shown
	}
	var b strings.Builder
	b.WriteString(strings.TrimRight(x.shown, "/"))
	for i := len(names) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(names[i])
	}
	return b.String()
}

// child is the path of n's entry name. The pseudo-node holding the start
// directory's parent has one child, the start entry, shown as the caller
// named it.
func (n *dirNode) child(name string) string {
	if n.parent == nil {
		return n.shown
	}
	return n.path() + "/" + name
}

// walk is the state shared by every goroutine of one walk: RemoveAll's or
// DiskUsage's. The walk — an explicit stack, at most maxOpen directory fds,
// every directory opened relative to its parent without following symlinks
// and checked for a mount boundary, listed in getdents batches — is the same
// for both; what it does with what it meets is act's.
type walk struct {
	act     action
	s       strategy
	rootMnt uint64
	maxOpen int
	hook    testhook.Hook // called after each removal; nil outside tests
	// inodeOrder: RemoveAll unlinks each batch in inode order. Off on
	// tmpfs, where inode numbers are not the directory's order and sorting
	// by them only scatters the unlinks (docs/benchmarks.md), and for
	// DiskUsage, which unlinks nothing.
	inodeOrder bool
	// growBatches: a large directory is read in batches grown up to
	// maxBatchSize (see scratch.read), so that its inode order spans most
	// of it. On ext4 only: it took a million-file directory from 1.16x to
	// 0.94x rm -rf's time there, while on XFS one 4 MiB batch made 100,000
	// files slower than 1 MiB ones (docs/benchmarks.md).
	growBatches bool

	mu      sync.Mutex
	crossed []Entry      // the mounts met (LookAt), described by crossedMounts
	tab     *MountTable  // read before the walk (crossedMounts); nil: none yet
	errs    errlist.List // the failures (see fail)
	aborted atomic.Bool
}

// An action is what a walk does with the entries it meets. Its methods run
// on the walk's goroutines (several for a parallel RemoveAll), each for a
// directory that goroutine holds.
type action interface {
	// entered is called with each directory the walk opened below the
	// start directory. false: the walk does not descend into it (the
	// action recorded why); n's fd is closed.
	entered(w *walk, n *dirNode) bool
	// files acts on one batch of n's non-directory entries, in the order
	// it chooses (files may be reordered; names alias sc.buf, NUL-terminated
	// there), calling sc.pace once per entry. An entry that turns out to be
	// a directory is handed to subdir.
	files(w *walk, n *dirNode, sc *scratch, files []fileEnt, subdir func(name []byte))
	// mount records the mount met at the entry name of n, not entered.
	mount(w *walk, n *dirNode, name string)
	// replaced is called when the entry name of n, listed as a directory,
	// is a non-directory (a file or symlink swapped in) when opened.
	replaced(w *walk, n *dirNode, name string)
	// failed records err about the entry name of n (n itself when name is
	// empty), which the walk does not go into.
	failed(w *walk, n *dirNode, name string, err error)
	// denied is called when the subdirectory name of n, on the walk's
	// mount when looked at, cannot be opened for listing (EACCES, err):
	// the walk does not go into it.
	denied(w *walk, n *dirNode, name string, err error)
	// done is called when n is listed to its end and every subdirectory
	// is done, while n and its parent are open. true lists n again from
	// the start (done has rewound it).
	done(w *walk, n *dirNode) (again bool)
	// reopened is called when n, evicted, has been reopened through ".."
	// (a new fd, at offset 0).
	reopened(w *walk, n *dirNode) error
}

// openDir opens the subdirectory name of parent without following
// symlinks and without crossing a mount. crossed is true when name is the
// root of another mount; nothing is opened then.
func (w *walk) openDir(parent *dirNode, name string) (fd int, crossed bool, err error) {
	return w.openDirMode(parent, name, unix.O_RDONLY)
}

// openDirMode is openDir with the open mode: O_RDONLY to list the
// directory, O_PATH only to look at it (which needs no permission on the
// directory itself). The mount checks are the same.
func (w *walk) openDirMode(parent *dirNode, name string, mode int) (fd int, crossed bool, err error) {
	if w.s == strategyOpenat2 {
		fd, err = fsat.Openat2(parent.fd, name, &unix.OpenHow{
			Flags:   uint64(mode) | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == unix.EXDEV {
			return -1, true, nil
		}
		return fd, false, err
	}
	q := w.s.mountQuery()
	// Look before opening: opening a mount point reaches the mounted
	// filesystem (a FUSE daemon that stopped answering would block the
	// walk). StatMount asks nothing of it. The check after the open
	// catches a mount that appears in between.
	s, err := fsat.StatMount(parent.fd, name, q)
	if err == nil && (s.Key() != w.rootMnt || s.Root) {
		return -1, true, nil
	}
	fd, err = fsat.Openat(parent.fd, name, mode|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, false, err
	}
	if s, err = statMount(fd, "", q); err != nil {
		unix.Close(fd)
		return -1, false, err
	}
	if s.Key() != w.rootMnt || s.Root {
		unix.Close(fd)
		return -1, true, nil
	}
	return fd, false, nil
}

// enter opens subdirectory name of parent and returns its node, or nil
// when there is nothing to descend into (gone, a mount, replaced by a
// non-directory, refused by the action, or an error recorded).
func (w *walk) enter(parent *dirNode, name string) *dirNode {
	if testHookBeforeEnter != nil {
		testHookBeforeEnter(parent.child(name))
	}
	fd, crossed, err := w.openDir(parent, name)
	if err == nil && !crossed && testHookAfterEnter != nil {
		testHookAfterEnter(parent.child(name))
	}
	switch {
	case crossed:
		w.act.mount(w, parent, name)
		return nil
	case err == nil:
		n := &dirNode{parent: parent, name: name, fd: fd, depth: parent.depth + 1}
		if !w.act.entered(w, n) {
			unix.Close(fd)
			return nil
		}
		return n
	case err == unix.ENOENT:
		return nil
	case err == unix.ENOTDIR || err == unix.ELOOP:
		w.act.replaced(w, parent, name)
		return nil
	case err == unix.EACCES:
		w.act.denied(w, parent, name, &os.PathError{Op: "openat", Path: parent.child(name), Err: err})
		return nil
	}
	w.act.failed(w, parent, name, &os.PathError{Op: "openat", Path: parent.child(name), Err: err})
	return nil
}

// scratch is one goroutine's reusable memory for listing directories, and
// its pacing.
type scratch struct {
	buf   []byte    // getdents64 records
	files []fileEnt // the batch's non-directories, for the action
	ops   int       // system calls since the goroutine last yielded (see pace)
}

// paceOps is how many system calls a walk goroutine makes between yields:
// a few milliseconds' worth of unlinks (2–10 µs each).
const paceOps = 256

// pace counts one system call of the goroutine and yields the processor
// every paceOps of them. A goroutine that issues system calls back to back
// never passes through the scheduler, so after 10 ms the runtime's monitor
// takes its P away in the middle of a syscall and hands it to another
// thread, and polls every 20 µs again: on a flat directory of 100,000
// files on ext4 that cost thousands of futex wake-ups and context switches
// and about a tenth of the time (docs/benchmarks.md). A yield
// every few milliseconds keeps the goroutine fresh for the monitor, which
// then backs off to 10 ms polls. (RawSyscall would avoid the monitor too,
// but a goroutine in a raw syscall cannot be stopped: one unlink that
// blocks, on a stalled disk or on a file a hostile writer keeps locked,
// would stop every goroutine of the process at the next garbage collection.)
func (sc *scratch) pace() {
	sc.ops++
	if sc.ops >= paceOps {
		sc.ops = 0
		runtime.Gosched()
	}
}

// scratchPool keeps listing buffers between calls: a teardown of a small
// volume should not allocate a megabyte each time.
var scratchPool = sync.Pool{New: func() any { return &scratch{buf: make([]byte, direntBufSize)} }}

// getScratch and putScratch take a goroutine's scratch from the pool and
// give it back; one grown for a large directory is dropped instead, so the
// pool holds only the standard buffer.
func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(sc *scratch) {
	if len(sc.buf) == direntBufSize && cap(sc.files) <= direntBufSize/(direntNameOff+1) {
		scratchPool.Put(sc)
	}
}

// read lists the directory fd into sc.buf and returns how many bytes of
// records it holds. With grow, a directory whose records fill the buffer
// is read on, into a buffer grown up to maxBatchSize, so that one batch — sorted by
// inode before its unlinks — covers as much of a large directory as
// memory allows: a directory of a million files on ext4 took 1.16x rm -rf's
// time in 1 MiB batches, whose inode order spans the whole inode table
// (docs/benchmarks.md). Without grow a batch is one buffer. An error after some records were read is left for
// the next call, which meets it again.
func (sc *scratch) read(fd int, grow bool) (int, error) {
	nread := 0
	for {
		var m int
		err := fsat.Retry(func() (err error) {
			m, err = unix.Getdents(fd, sc.buf[nread:])
			return err
		})
		if err != nil {
			if nread > 0 {
				return nread, nil
			}
			return 0, err
		}
		nread += m
		// getdents64 fills the buffer while entries fit: room left
		// for the longest record means the directory ended.
		if !grow || m == 0 || len(sc.buf)-nread >= maxDirentSize || len(sc.buf) >= maxBatchSize {
			return nread, nil
		}
		grown := make([]byte, min(4*len(sc.buf), maxBatchSize))
		copy(grown, sc.buf[:nread])
		sc.buf = grown
	}
}

// list reads one batch of n's entries: non-directories go to the action at
// once, subdirectories are passed to subdir. It returns false at the end of
// the directory.
func (w *walk) list(n *dirNode, sc *scratch, subdir func(name []byte)) bool {
	nread, err := sc.read(n.fd, w.growBatches)
	if err == unix.ENOENT {
		// The kernel refuses so to list a dead directory: one emptied and
		// removed since the walk opened it, as a concurrent RemoveAll
		// does. It is gone, which is what was asked; its end. (A
		// filesystem may also answer ENOENT for a live directory: finish
		// checks that it no longer stands at its name before taking it
		// as gone, and otherwise reports the failure.)
		n.gone.Store(true)
		return false
	}
	if err != nil {
		w.act.failed(w, n, "", &os.PathError{Op: "getdents64", Path: n.path(), Err: err})
		return false
	}
	if nread == 0 {
		return false
	}
	buf := sc.buf[:nread]
	files := sc.files[:0]
	var skip map[string]struct{}
	if n.reopened {
		skip = n.keptNames // already met and reported in this walk
	}
	for off := 0; off < nread; {
		d, next, err := nextDirent(buf, off)
		if err != nil {
			w.act.failed(w, n, "", &os.PathError{Op: "getdents64", Path: n.path(), Err: err})
			return false
		}
		off = next
		switch {
		case isDotOrDotDot(d.name):
		case skip != nil && isKept(skip, d.name):
		case d.typ == unix.DT_DIR:
			subdir(d.name)
		default:
			files = append(files, d.fileEnt())
		}
	}
	sc.pace()
	w.act.files(w, n, sc, files, subdir)
	sc.files = files[:0]
	return true
}

func isKept(names map[string]struct{}, name []byte) bool {
	_, ok := names[string(name)]
	return ok
}

// serial walks the tree under root depth-first with an explicit stack.
// At most w.maxOpen directory fds are open; the fds of shallower frames
// are closed and reopened through ".." on the way back up.
func (w *walk) serial(root *dirNode, sc *scratch) {
	stack := []*dirNode{root}
	defer func() {
		for _, f := range stack {
			if f.fd >= 0 {
				unix.Close(f.fd)
			}
		}
	}()
	base := root.depth
	for len(stack) > 0 {
		if w.aborted.Load() {
			return
		}
		sc.pace()
		f := stack[len(stack)-1]
		if f.next < len(f.subdirs) {
			name := f.subdirs[f.next]
			f.next++
			if c := w.enter(f, name); c != nil {
				stack = append(stack, c)
				if len(stack) > w.maxOpen {
					w.evict(stack[len(stack)-w.maxOpen-1])
				}
			}
			continue
		}
		if !f.eof {
			f.subdirs, f.next = f.subdirs[:0], 0
			if !w.list(f, sc, func(name []byte) { f.subdirs = append(f.subdirs, string(name)) }) {
				f.eof = true
			}
			continue
		}
		// f is listed and its subdirectories are done: finish f (for
		// RemoveAll, remove it from its parent).
		if f.depth > base && f.parent.fd < 0 {
			if err := w.reopenParent(f); err != nil {
				w.abort(err)
				return
			}
		}
		if w.act.done(w, f) {
			continue
		}
		unix.Close(f.fd)
		f.fd = -1
		stack = stack[:len(stack)-1]
	}
}

// evict closes a frame's fd, remembering its identity for reopenParent and
// its listing position.
func (w *walk) evict(f *dirNode) {
	if f.fd < 0 || f.parent == nil || f.parent.parent == nil {
		return // never the start directory
	}
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return // keep it open rather than lose the ability to verify it
	}
	off, err := unix.Seek(f.fd, 0, io.SeekCurrent)
	if err != nil {
		return
	}
	f.dev, f.ino, f.off = uint64(st.Dev), uint64(st.Ino), off
	unix.Close(f.fd)
	f.fd = -1
}

// reopenParent reopens the evicted parent of f through f's "..", and
// proves it is the same directory by device and inode: if the tree was
// moved meanwhile, the walk stops instead of removing from somewhere else.
//
// Like any lookup, ".." steps onto whatever is mounted on the parent now,
// so it is opened with the same mount check as a descent (EXDEV, or another
// mount ID): a mount that appeared on an evicted directory is reported and
// never entered. The covered directory is then out of reach; the walk stops.
// (RemoveAll reports that mount with its type; DiskUsage, which stops at
// its first error, returns the error.)
func (w *walk) reopenParent(f *dirNode) error {
	p := f.parent
	fd, crossed, err := w.openDir(f, "..")
	if crossed {
		w.foundMount(f.fd, "..", p.path())
		return &os.PathError{Op: "openat", Path: p.path(), Err: errors.New("a mount appeared on this directory during removal; stopping")}
	}
	if err != nil {
		return &os.PathError{Op: "openat", Path: p.path(), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "fstat", Path: p.path(), Err: err}
	}
	if uint64(st.Dev) != p.dev || uint64(st.Ino) != p.ino {
		unix.Close(fd)
		return &os.PathError{Op: "openat", Path: p.path(), Err: errors.New("directory was moved during removal; stopping")}
	}
	p.fd = fd
	return w.act.reopened(w, p)
}

// String is used in test failure messages.
func (n *dirNode) String() string { return strings.TrimPrefix(n.path(), "/") }
