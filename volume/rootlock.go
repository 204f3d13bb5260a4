package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"
)

// Kinds of owner of a kubelet root's volumes, each with a lock of its own
// (see LockRoot). Two owners of one kind on one root tear down each other's
// volumes; owners of different kinds tear down different volumes, and may
// share a root.
const (
	// LockVolumeManager is the lock of the root's volume manager, which
	// tears down every volume of its plugins that none of its pods wants,
	// and removes pod directories: a reconciler.Manager while it runs, and
	// nodevol teardown while it tears down.
	LockVolumeManager = "volume-manager"
)

// LockCSIDriver is the lock of the CSI node plugin named driver (nodevol-csi
// while it serves): two processes serving one driver name take each other's
// publish and unpublish calls and sockets; drivers of other names serve
// other volumes.
func LockCSIDriver(driver string) string { return "csi-" + driver }

// validLockOwner is whether owner may own a lock (it names the lock
// file): 1 to 100 ASCII letters, digits, '.' and '-', starting with a
// letter or digit. Checked by hand, not with a regexp, which would be
// compiled at every start of every program linking this package.
func validLockOwner(owner string) bool {
	if len(owner) == 0 || len(owner) > 100 {
		return false
	}
	for i := 0; i < len(owner); i++ {
		c := owner[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// LockOptions configure LockRoot.
type LockOptions struct {
	// Program names the holder in the lock file (default: the base name of
	// the executable as it was started, os.Args[0]).
	Program string
	// Clock says when the lock was taken (real time when nil).
	Clock clock.PassiveClock
}

// LockHolder is what a lock file says of the process that holds the lock.
type LockHolder struct {
	Owner   string    `json:"owner"`
	PID     int       `json:"pid"`
	Program string    `json:"program"`
	Since   time.Time `json:"since"`
}

// String is "PID 1234 (nodevol-csi) since 2026-11-27T08:00:00Z".
func (h LockHolder) String() string {
	return fmt.Sprintf("PID %d (%s) since %s", h.PID, h.Program, h.Since.UTC().Format(time.RFC3339))
}

// ErrRootLocked is matched by the error of LockRoot when another holder
// has the lock (a *RootLockedError).
var ErrRootLocked = errors.New("another process holds the kubelet root's lock")

// RootLockedError is the error of LockRoot when another holder — another
// process, or another holder in this one — has the lock.
type RootLockedError struct {
	Root  string // the kubelet root
	Owner string // the lock's kind of owner, as given to LockRoot
	Path  string // the lock file
	// Holder is what the lock file says of the holder, when HolderErr is
	// nil. The holder writes it right after it takes the lock: for an
	// instant the file may still name the previous holder.
	Holder    LockHolder
	HolderErr error // why the lock file could not say
}

func (e *RootLockedError) Error() string {
	who := e.Holder.String()
	if e.HolderErr != nil {
		who = fmt.Sprintf("a process whose name cannot be read (%v)", e.HolderErr)
	}
	return fmt.Sprintf("kubelet root %s: its %s lock (%s) is held by %s; two holders of it on one root would tear down each other's volumes",
		e.Root, e.Owner, e.Path, who)
}

// Is makes the error match ErrRootLocked.
func (e *RootLockedError) Is(target error) bool { return target == ErrRootLocked }

// RootLock is a held lock on a kubelet root (see LockRoot).
type RootLock struct {
	f      *os.File
	path   string
	holder LockHolder
}

// Path is the lock file.
func (l *RootLock) Path() string { return l.path }

// Holder is what the lock file says: this process.
func (l *RootLock) Holder() LockHolder { return l.holder }

// Release releases the lock. The lock file stays (removing it would let a
// process that opened it before the removal lock a file nobody else
// sees). Releasing a nil or released lock does nothing.
func (l *RootLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// lockFileName is the lock file of owner, directly under the kubelet root,
// where no pod can write.
func lockFileName(owner string) string { return "nodevol-" + owner + ".lock" }

// lockFileMax bounds what is read of a lock file.
const lockFileMax = 4 << 10

// LockRoot takes the lock of owner (LockVolumeManager,
// LockCSIDriver(name)) on the kubelet root of l, and holds it until Release
// or until the process ends, however it ends: it is a flock(2) on
// <root>/nodevol-<owner>.lock, which the kernel releases with the last
// descriptor of the file. A lock another holder has is not waited for:
// the error is a *RootLockedError naming the holder (its PID, program and
// since when, which each holder writes into the file).
//
// The file is opened relative to the root's descriptor without following a
// symlink (one there is an error), and must be a regular file of the
// caller's with one link; it is made owner-only, so no other user can take
// a shared lock on it and keep the owner out. The root itself (it may be a
// symlink) is trusted. Linux only; elsewhere the error matches
// errors.ErrUnsupported.
func LockRoot(l Layout, owner string, opts LockOptions) (*RootLock, error) {
	if l.root == "" {
		return nil, fmt.Errorf("%w: zero Layout", ErrInvalidRoot)
	}
	if !validLockOwner(owner) {
		return nil, fmt.Errorf("lock owner %q: want 1 to 100 letters, digits, '.' and '-', starting with a letter or digit", owner)
	}
	if opts.Program == "" && len(os.Args) > 0 {
		opts.Program = filepath.Base(os.Args[0])
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return lockRoot(l.root, owner, opts)
}
