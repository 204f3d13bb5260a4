// Package fsat reaches files below a trusted directory without ever
// resolving a name twice: every directory is opened relative to its
// parent's file descriptor, one component at a time, without following
// symlinks, and every later check and action uses the descriptor.
//
// It exists for the kubelet root. Whoever can write into a pod directory (a
// container with bidirectional mount propagation, a compromised plugin)
// controls the names, symlinks, mounts and file contents below it and can
// swap them between any two system calls. A path like
// <root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<vol>, resolved by the
// kernel each time it is used, can lead somewhere else on the second use:
// a symlink exchanged for a directory (renameat2 RENAME_EXCHANGE) between a
// check and an action redirects the action out of the tree. Here the root
// is opened once (it may itself be a symlink: it is trusted), each
// component below it is opened with O_NOFOLLOW|O_DIRECTORY relative to the
// previous one, and a symlink where a directory belongs is an error that
// names it (matching ErrSymlink), never followed.
//
// Files are read defensively: opened with O_NOFOLLOW|O_NONBLOCK (a FIFO
// planted where a file belongs cannot block), required to be regular, and
// read up to a caller-given size (a symlink to /dev/zero or a huge file
// cannot exhaust memory). Files are written atomically and durably
// (temporary file, fsync, rename, fsync of the directory).
//
// It is also the one home of the low-level helpers every package of the
// module uses: Retry (a system call retried on EINTR), Openat (with
// O_CLOEXEC), Openat2, Reopen (an O_PATH descriptor opened for real) and
// StatMount (a file's mount IDs, device, size and mount-root attribute,
// asked without reaching its filesystem). The system calls a scan makes
// for every entry take their names from the caller's stack, not a heap
// copy each. mountdetect, fsquota and the rest import them; fsat imports
// nothing of the module, so no package has a cycle through it.
//
// Linux only; elsewhere every function returns ErrUnsupported.
package fsat

import (
	"errors"
)

// ErrSymlink is matched by errors for a symlink met where a directory or a
// regular file belongs. It also matches syscall.ELOOP.
var ErrSymlink = errors.New("is a symlink (never followed below the kubelet root)")

// ErrNotRegular is matched by errors for a file that is not a regular file
// (a FIFO, device, socket or directory) where one belongs.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is matched by errors for a file larger than the caller's cap.
var ErrTooLarge = errors.New("file too large")

// ErrOtherMount is matched by errors for a directory that must be on the
// same mount as the directory it was opened from and is not (something is
// mounted on it, or it is reached through a mount).
var ErrOtherMount = errors.New("is on another mount")

// ErrUnsupported is returned on platforms other than Linux.
var ErrUnsupported error = &PrefixError{"fsat: ", errors.ErrUnsupported}

// PrefixError is Err with Prefix before its message, and matches Err
// (errors.Is, errors.As), as fmt.Errorf(Prefix+"%w", Err) would make it:
// for package-level errors, which fmt.Errorf would make at every start of
// every program that links the package, faulting fmt's code in before
// main (docs/benchmarks.md, "Start time"). A composite literal costs
// nothing at start.
type PrefixError struct {
	Prefix string
	Err    error
}

func (e *PrefixError) Error() string { return e.Prefix + e.Err.Error() }

func (e *PrefixError) Unwrap() error { return e.Err }

// ErrInvalidComponent is matched by errors for a relative path with an
// empty, "." or ".." component, or an absolute one.
var ErrInvalidComponent = errors.New("invalid path component")

// ErrStop, returned by an EachEntry callback, ends the listing early
// without an error.
var ErrStop = errors.New("stop listing")
