package mounttest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// Attacker runs a step on a thread of its own in a mount namespace of its
// own, made private, where the mounts made after it starts are not
// visible: like a process in another container with write access to a
// pod directory, it can rename a directory that is a mount point in the
// test's namespace. Like such a container (whose default capabilities
// lack it), it has no CAP_LINUX_IMMUTABLE: it cannot clear the immutable
// flag of a directory, and so cannot rename one. While resumed it calls
// step in a loop; Pause stops it and waits until no step is in flight.
type Attacker struct {
	mu      sync.Mutex // held while a step runs
	wake    *sync.Cond // on mu: enabled or quit changed
	enabled atomic.Bool
	quit    atomic.Bool
	steps   atomic.Int64
	done    chan struct{}
}

// StartAttacker starts a paused Attacker; t's clean-up stops it.
func StartAttacker(t testing.TB, step func() error) *Attacker {
	t.Helper()
	a := &Attacker{done: make(chan struct{})}
	a.wake = sync.NewCond(&a.mu)
	ready := make(chan error, 1)
	go func() {
		defer close(a.done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := privateMountNS(); err != nil {
			ready <- err
			return
		}
		if err := dropCapability(unix.CAP_LINUX_IMMUTABLE); err != nil {
			ready <- err
			return
		}
		ready <- nil
		a.mu.Lock()
		defer a.mu.Unlock()
		for !a.quit.Load() {
			if !a.enabled.Load() {
				a.wake.Wait() // paused: idle without spinning
				continue
			}
			if step() == nil {
				a.steps.Add(1)
			}
			// Let Pause in between steps.
			a.mu.Unlock()
			a.mu.Lock()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("attacker: %v", err)
	}
	t.Cleanup(func() {
		a.mu.Lock()
		a.quit.Store(true)
		a.wake.Broadcast()
		a.mu.Unlock()
		<-a.done
	})
	return a
}

// peerMountNS moves the calling thread into a new mount namespace, where
// the copies of shared mounts are peers of the originals.
func peerMountNS() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	return nil
}

// privateMountNS moves the calling thread into a new mount namespace and
// makes "/" private there recursively, so that no mount made afterwards
// in the old namespace is seen in the new one, nor the reverse.
func privateMountNS() error {
	if err := peerMountNS(); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	return nil
}

// errTried is what a StartAttackerOnce step returns after its one try.
var errTried = errors.New("the attacker's one step was tried already")

// StartAttackerOnce is StartAttacker with a step that is tried once: after
// its first call, whether it succeeded or not, the attacker only idles (a
// failed try is not counted in Steps, so a test that waits for the step
// sees it fail).
func StartAttackerOnce(t testing.TB, step func() error) *Attacker {
	t.Helper()
	var tried atomic.Bool
	return StartAttacker(t, func() error {
		if tried.Swap(true) {
			return errTried
		}
		return step()
	})
}

// Resume lets the attacker run.
func (a *Attacker) Resume() {
	a.enabled.Store(true)
	a.mu.Lock()
	a.wake.Broadcast()
	a.mu.Unlock()
}

// Pause stops the attacker and waits for a step in flight to finish.
func (a *Attacker) Pause() {
	a.enabled.Store(false)
	a.mu.Lock()
	defer a.mu.Unlock()
}

// StepWithin lets the attacker run until one more step has succeeded, or
// d has passed, and pauses it again; false when no step succeeded.
func (a *Attacker) StepWithin(d time.Duration) bool {
	before := a.steps.Load()
	a.Resume()
	deadline := time.Now().Add(d)
	for a.steps.Load() == before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	a.Pause()
	return a.steps.Load() > before
}

// Steps is the number of steps that succeeded so far.
func (a *Attacker) Steps() int64 { return a.steps.Load() }

// Exchange swaps the names a and b in the directory dirfd atomically
// (renameat2 RENAME_EXCHANGE).
func Exchange(dirfd int, a, b string) error {
	return unix.Renameat2(dirfd, a, dirfd, b, unix.RENAME_EXCHANGE)
}

// IsMountRoot reports whether path (a symlink is not followed) is the root
// of a mount; a missing path is not.
func IsMountRoot(t testing.TB, path string) bool {
	t.Helper()
	s, err := fsat.StatMount(unix.AT_FDCWD, path, fsat.TableID)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false
		}
		t.Fatalf("statx %s: %v", path, err)
	}
	return s.Root
}

// RestoreSwap undoes what an Attacker exchanging name and swap in dir left
// (pause it first), whatever the code under test did meanwhile: every
// directory among the two, with what is mounted on it, is removed, and the
// symlink to target ends up named swap again (made anew when the code
// under test unlinked it).
func RestoreSwap(t testing.TB, dir, name, swap, target string) {
	t.Helper()
	for _, n := range []string{name, swap} {
		p := filepath.Join(dir, n)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		for IsMountRoot(t, p) {
			if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
				t.Fatalf("detach %s: %v", p, err)
			}
		}
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(dir, swap)); err != nil {
			t.Fatal(err)
		}
	} else if _, err := os.Lstat(filepath.Join(dir, swap)); err != nil {
		if err := os.Symlink(target, filepath.Join(dir, swap)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.Readlink(filepath.Join(dir, swap)); err != nil || got != target {
		t.Fatalf("swap symlink: %q, %v", got, err)
	}
}

// FileFlags returns the inode flags of path (FS_IOC_GETFLAGS; a symlink
// is not followed): FS_IMMUTABLE_FL, FS_PROJINHERIT_FL and the others
// lsattr shows. It skips the test where the filesystem has none.
func FileFlags(t testing.TB, path string) uint32 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	return fileFlags(t, fd)
}

func fileFlags(t testing.TB, fd int) uint32 {
	t.Helper()
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		Skip(t, "FS_IOC_GETFLAGS unsupported here: %v", err)
	}
	return flags
}

// FS_IOC_GETFLAGS flags the tests look at.
const (
	FlagImmutable   = 0x00000010 // FS_IMMUTABLE_FL
	FlagProjInherit = 0x20000000 // FS_PROJINHERIT_FL (FS_XFLAG_PROJINHERIT)
)

// SetImmutable sets or clears FS_IMMUTABLE_FL on path (not followed when a
// symlink): an entry nobody, root included, can remove or change. It
// skips the test where the filesystem cannot; clearing a missing path is
// a no-op.
func SetImmutable(t testing.TB, path string, on bool) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && !on {
			return
		}
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags := fileFlags(t, fd)
	if on {
		flags |= FlagImmutable
	} else {
		flags &^= FlagImmutable
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		Skip(t, "cannot set the immutable flag: %v", err)
	}
}

// StalledFUSE mounts on target, with source, a FUSE filesystem whose
// daemon never answers (FUSE_INIT is never read): every request to it
// waits, as with a daemon that hung. rootmode is the octal mode of its
// root ("040000" a directory, "0100000" a regular file, to mount on a
// file). Skips where /dev/fuse cannot be opened. The clean-up closes the
// connection, which makes every blocked call return.
func StalledFUSE(t testing.TB, source, target, rootmode string) {
	t.Helper()
	fuse, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		Skip(t, "no /dev/fuse: %v", err)
	}
	Mount(t, source, target, "fuse", 0, fmt.Sprintf("fd=%d,rootmode=%s,user_id=0,group_id=0", fuse, rootmode))
	t.Cleanup(func() { unix.Close(fuse) })
}

// Within runs fn and returns its error, failing the test (instead of
// hanging it) when fn has not returned after d: what blocks.
func Within(t testing.TB, d time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Errorf("%s has not returned after %v: it blocks", what, d)
		return nil
	}
}

// dropCapability removes c from the calling thread's effective,
// permitted and inheritable sets (the other threads keep theirs).
func dropCapability(c uint) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	bit := uint32(1) << (c % 32)
	data[c/32].Effective &^= bit
	data[c/32].Permitted &^= bit
	data[c/32].Inheritable &^= bit
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// NamespaceThread runs functions on a thread of its own in a mount
// namespace of its own.
type NamespaceThread struct {
	do   chan func()
	done chan struct{}
}

// StartPeer starts a NamespaceThread whose namespace keeps the propagation
// of the test's mounts: the copy there of a shared mount is its peer, as a
// kubelet root is in a container that mounts it with mountPropagation
// Bidirectional. What either side mounts or unmounts below a shared mount
// reaches the other. t's clean-up stops it.
func StartPeer(t testing.TB) *NamespaceThread {
	t.Helper()
	return startNamespaceThread(t, peerMountNS)
}

// StartPrivateNamespace starts a NamespaceThread in a namespace like an
// Attacker's: "/" is private there, so the mounts made after it starts are
// not seen in it, and a directory that is a mount point in the test's
// namespace is a plain directory there, which can be renamed. t's
// clean-up stops it.
func StartPrivateNamespace(t testing.TB) *NamespaceThread {
	t.Helper()
	return startNamespaceThread(t, privateMountNS)
}

func startNamespaceThread(t testing.TB, enter func() error) *NamespaceThread {
	t.Helper()
	n := &NamespaceThread{do: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(n.done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := enter(); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for fn := range n.do {
			fn()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("namespace thread: %v", err)
	}
	t.Cleanup(func() { close(n.do); <-n.done })
	return n
}

// Do runs fn in the thread's namespace and waits for it. fn runs off the
// test's goroutine: it must not call t.Fatal.
func (n *NamespaceThread) Do(fn func()) {
	ran := make(chan struct{})
	n.do <- func() { defer close(ran); fn() }
	<-ran
}

// Flicker is an attacker's thread changing what a name is, over and over
// (BindFlicker, ExchangeFlicker).
type Flicker struct {
	stop  atomic.Bool
	count atomic.Int64
	done  chan struct{}
}

// flicker runs act over and over on a goroutine of its own until Stop,
// counting the times it reports done.
func flicker(act func() (done bool)) *Flicker {
	f := &Flicker{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for !f.stop.Load() {
			if act() {
				f.count.Add(1)
			}
		}
	}()
	return f
}

// BindFlicker binds source on target and detaches it again, over and over
// on a goroutine of its own, calling before (if not nil) before each bind,
// until Stop. Count counts the binds made.
func BindFlicker(source, target string, before func()) *Flicker {
	return flicker(func() bool {
		if before != nil {
			before()
		}
		if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
			return false
		}
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return true
	})
}

// ExchangeFlicker exchanges the paths a and b (renameat2 RENAME_EXCHANGE),
// over and over on a goroutine of its own, until Stop. Count counts the
// exchanges made; an odd count leaves them exchanged.
func ExchangeFlicker(a, b string) *Flicker {
	return flicker(func() bool {
		return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) == nil
	})
}

// Count is the number of changes made so far.
func (f *Flicker) Count() int64 { return f.count.Load() }

// Stop ends the thread, waiting for it 10 s at most: never for good, as
// a stalled FUSE it bound is only closed by a clean-up after the test.
func (f *Flicker) Stop(t testing.TB) {
	f.stop.Store(true)
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Error("the attacker's thread is blocked")
	}
}
