// Package subpath cleans the bind mounts the kubelet makes for containers'
// subPath volume mounts, kept at
// <root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>, before
// the volume itself is torn down.
//
// The tree is reached by descriptors from the kubelet root: pods/<uid>/
// volume-subpaths is opened one component at a time without following
// symlinks (a symlink there is an error naming it, and nothing is
// touched), and everything below is examined and changed through the
// descriptor of its parent directory.
//
// An <index> entry is unmounted only when its mount is provably one of the
// volume's own subPath binds: the same filesystem as the volume
// directory, and a mount root (mountinfo's root field) that is the volume
// directory's own position in that filesystem or lies beneath it. A
// tmpfs mounted there, or a bind of anything outside the volume, is
// foreign; so are stacked mounts, a mount inside an entry, on a container
// directory or on the volume's subpath directory itself, and a mount
// whose status cannot be learned.
//
// [Cleaner.Check] examines everything and changes nothing; [Cleaner.Clean] runs the same
// examination first and, if anything is foreign, refuses — changing
// nothing, naming every foreign mount (ErrRefused, and
// mountdetect.ErrCrossesMount). Otherwise it unmounts each own bind (never
// lazily: a busy mount is an error naming its path), then removes the
// emptied entries and directories with rmdir or, for a file entry,
// unlink. Nothing is ever removed recursively, nothing is entered across a
// mount, and symlinks are never followed: a symlink planted at or below
// the volume's subpath directory is unlinked as a link. Missing
// directories are success.
//
// Limits: right before each umount2 the entry's mount ID is checked again
// on its parent's descriptor, and right after it the entry must no longer
// be a mount root; between that check and umount2, whoever can rename
// entries in the container directory could put another mount point in
// the entry's place, and umount2 would take that mount (nothing of it is
// removed: rmdir and unlink do not remove what is not empty, and the check
// after the unmount reports the event). Linux only.
package subpath

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// ErrLeft is matched by the error of a Clean that left something behind
// while cleaning (a busy mount, an entry that changed since the check).
var ErrLeft = errors.New("subpath entries left in place")

// ErrRefused is matched by the error of a Check or Clean that found a
// mount under the volume's subpath tree that is not one of the volume's
// own subPath binds, an entry it could not examine, or an <index>
// directory that is not a mount point and is not empty. A Clean that
// refuses changes nothing.
var ErrRefused = errors.New("subpath cleanup refused, nothing was changed")

// RefusedError is the error of a Check or Clean that refuses: it matches
// ErrRefused, and unwraps to a *mountdetect.CrossesMountError listing the
// foreign mounts (when there are any) and to each failure to examine an
// entry.
type RefusedError struct {
	Dir    string              // the volume's subpath directory
	Mounts []mountdetect.Mount // every mount that is not one of the volume's own binds
	// Errs are the entries that could not be examined: past 100 of them,
	// the 100 with the smallest paths, sorted, and a
	// *mountdetect.MoreErrorsError counting the rest (RemoveAll's rule).
	Errs []error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v under %s: %v", ErrRefused, e.Dir, errors.Join(e.Unwrap()...))
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Unwrap gives the foreign mounts' *mountdetect.CrossesMountError, then
// the other failures.
func (e *RefusedError) Unwrap() []error {
	var errs []error
	if len(e.Mounts) > 0 {
		errs = append(errs, &mountdetect.CrossesMountError{Path: e.Dir, Mounts: e.Mounts})
	}
	return append(errs, e.Errs...)
}

// Entry is one <container>/<index> entry of a volume's subpath tree.
type Entry struct {
	Container  string `json:"container"`
	Index      string `json:"index"`
	Path       string `json:"path"`
	MountPoint bool   `json:"mountPoint"`
	// Own: the mount is a bind of the volume directory or of something
	// inside it (Clean unmounts it); false for an entry that is not a
	// mount point or whose mount is foreign (Clean refuses).
	Own bool `json:"own"`
}

// Cleaner cleans subpaths under one kubelet root; the reconciler's
// Manager runs Check, then (once the plugin agrees too) Clean, before
// each TearDown.
type Cleaner struct {
	layout volume.Layout
}

// New returns a Cleaner for layout's root.
func New(layout volume.Layout) *Cleaner { return &Cleaner{layout: layout} }

// Check examines the subpath tree of the volume vol (of the plugin named
// plugin, e.g. kubernetes.io/empty-dir) of the pod podUID and returns the
// error Clean would refuse with, changing nothing; nil when Clean would
// go ahead.
func (c *Cleaner) Check(ctx context.Context, podUID, plugin, vol string) error {
	t, err := c.open(podUID, plugin, vol)
	if t == nil || err != nil {
		return err
	}
	defer t.close()
	return t.check()
}

// Clean removes the subpath bind mounts and directories of a pod's volume,
// after the same examination as Check: a refusal changes nothing.
func (c *Cleaner) Clean(ctx context.Context, podUID, plugin, vol string) error {
	t, err := c.open(podUID, plugin, vol)
	if t == nil || err != nil {
		return err
	}
	defer t.close()
	return t.clean(ctx)
}

// Examine is Check and List in one, answered from tab (nil: the mount
// table is read now; a scan of many volumes reads it once): the entries,
// and the error Clean would refuse with (nil when it would go ahead). err
// is for what could not be examined at all: with WithinBudget, an error
// matching volume.ErrTooManyEntries when the budget stopped the listing.
func (c *Cleaner) Examine(podUID, plugin, vol string, tab *mountdetect.MountTable, opts ...ExamineOption) (entries []Entry, refusal, err error) {
	t, err := c.open(podUID, plugin, vol)
	if t == nil || err != nil {
		return nil, nil, err
	}
	defer t.close()
	var cfg examineConfig
	for _, o := range opts {
		o.applyExamine(&cfg)
	}
	return t.examineAll(tab, cfg.budget)
}

// ExamineOption configures Examine.
type ExamineOption interface{ applyExamine(*examineConfig) }

type examineConfig struct{ budget *volume.EntryBudget }

type withinBudget struct{ b *volume.EntryBudget }

func (w withinBudget) applyExamine(c *examineConfig) { c.budget = w.b }

// WithinBudget makes Examine read at most what b allows of the subpath
// tree (its container directories and their entries), taking what it
// reads from b: a scan gives each pod one budget, of which the pod's
// subPath trees are part (volume.ScanResult.Budgets). Whoever can write
// into a pod directory can make any number of entries there; past the
// budget the examination stops with an error matching
// volume.ErrTooManyEntries, and nothing is concluded about the tree.
// Check and Clean have no bound: they must see everything.
func WithinBudget(b *volume.EntryBudget) ExamineOption { return withinBudget{b} }

// List returns a pod volume's subpath entries (for `nodevol scan`), sorted
// by container and index. Entries it could not examine are left out and
// named in the error, which may come with the entries it did list.
func (c *Cleaner) List(podUID, plugin, vol string) ([]Entry, error) {
	t, err := c.open(podUID, plugin, vol)
	if t == nil || err != nil {
		return nil, err
	}
	defer t.close()
	return t.list()
}
