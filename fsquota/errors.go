package fsquota

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrUnsupported is matched (errors.Is) by every error that means "no
// project quotas here": another filesystem, a kernel without quotactl, a
// filesystem mounted without project quota accounting, another OS. Like
// every "not supported" error of nodevol (mountdetect.ErrUnsupported) it
// wraps errors.ErrUnsupported, so callers that only know the standard
// library (emptydir falls back to walking the tree) recognise it. The
// concrete error is an *UnsupportedError that says why.
var ErrUnsupported = fmt.Errorf("fsquota: %w", errors.ErrUnsupported)

// ErrNoProject is returned for usage queries on a directory that carries no
// project ID.
var ErrNoProject = errors.New("directory has no project ID")

// ErrNoFreeID is returned when allocation probed its bound of candidate IDs
// without finding one that is unrecorded and unused.
var ErrNoFreeID = errors.New("no free project ID")

// ErrUnsafeFile is returned when a bookkeeping file is a symlink or not a
// regular file; nodevol never writes through such a path.
var ErrUnsafeFile = errors.New("bookkeeping file is a symlink or not a regular file")

// UnsupportedError says why project quotas cannot be used at Path. It
// matches ErrUnsupported (and errors.ErrUnsupported) and unwraps to the
// underlying cause (often a syscall.Errno) when there is one.
type UnsupportedError struct {
	Path   string
	Reason string // human-readable: "tmpfs is not xfs or ext4", "quota accounting is off"
	Err    error  // the cause, may be nil
}

func (e *UnsupportedError) Error() string {
	s := "fsquota: " + e.Path + ": project quotas not supported: " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrUnsupported and the cause.
func (e *UnsupportedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnsupported}
	}
	return []error{ErrUnsupported, e.Err}
}

// ProjectError reports a failed operation on a project: which operation,
// which directory, which project ID (0 when not yet known) and why.
type ProjectError struct {
	Op        string // "assign", "clear", "usage", "set limit", "allocate", …
	Path      string
	ProjectID uint32
	Err       error
}

func (e *ProjectError) Error() string {
	s := "fsquota: " + e.Op + " " + e.Path
	if e.ProjectID != 0 {
		s += " (project " + strconv.FormatUint(uint64(e.ProjectID), 10) + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *ProjectError) Unwrap() error { return e.Err }

func isUnsupported(err error) bool { return errors.Is(err, ErrUnsupported) }
