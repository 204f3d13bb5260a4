package emptydir

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// Action is what a teardown does (or would do) to a volume directory.
type Action int

const (
	// ActionNone: nothing is there; only leftover metadata is removed.
	ActionNone Action = iota
	// ActionRemove: a Default volume, removed with mountdetect.RemoveAll.
	ActionRemove
	// ActionUnmountAndRemove: the volume is a tmpfs or hugetlbfs mount:
	// unmount it (never lazily), then remove the directory.
	ActionUnmountAndRemove
	// ActionRefuse: a mount beneath the volume, or a foreign mount on it:
	// nothing is changed.
	ActionRefuse
)

func (a Action) String() string {
	switch a {
	case ActionNone:
		return "nothing"
	case ActionRemove:
		return "remove"
	case ActionUnmountAndRemove:
		return "unmount-and-remove"
	case ActionRefuse:
		return "refuse"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// MarshalText prints the action's name.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// ReasonCode says why a teardown plan does what it does: for programs (a
// scan reads it), where Plan.Reason says it to people with the details,
// and Plan.Remedy what an operator can do about a refusal. The names
// (String) are stable. Each code belongs to one Action.
type ReasonCode int

const (
	// ReasonMissing (ActionNone): the volume directory does not exist.
	ReasonMissing ReasonCode = iota
	// ReasonNotMounted (ActionRemove): a Default volume, nothing mounted
	// on or beneath it.
	ReasonNotMounted
	// ReasonMountGone (ActionRemove): a Memory or HugePages volume whose
	// own mount is already gone.
	ReasonMountGone
	// ReasonSymlink (ActionRemove): the volume path is a symlink, which is
	// unlinked, not followed.
	ReasonSymlink
	// ReasonFile (ActionRemove): the volume path is a file, which is
	// unlinked.
	ReasonFile
	// ReasonOwnMount (ActionUnmountAndRemove): the volume's own tmpfs or
	// hugetlbfs, proven by SetUp's record.
	ReasonOwnMount
	// ReasonAdoptedMount (ActionUnmountAndRemove): the volume's own tmpfs
	// or hugetlbfs, mounted by the kubelet that ran before nodevol and
	// adopted by SetUp (WithAdoption), proven by its unique mount ID.
	ReasonAdoptedMount
	// ReasonNestedMounts (ActionRefuse): mounts beneath the volume
	// directory (Plan.Mounts), whose data is not the volume's. Remedy:
	// unmount them.
	ReasonNestedMounts
	// ReasonUncertain (ActionRefuse): the kernel cannot say for sure
	// whether the volume directory is a mount point (no statx mount IDs,
	// Linux < 5.8).
	ReasonUncertain
	// ReasonMountElsewhere (ActionRefuse): the volume's own mount is
	// mounted somewhere else (Plan.Mounts): its directory was renamed or
	// the mount moved, or a bind of it was made. It is never unmounted
	// there. Remedy: move it back, or unmount the others.
	ReasonMountElsewhere
	// ReasonStackedMounts (ActionRefuse): several mounts are stacked on the
	// volume directory; only a single mount SetUp made is ever unmounted.
	// Remedy: unmount the others.
	ReasonStackedMounts
	// ReasonForeignMount (ActionRefuse): something is mounted on the volume
	// path that cannot be proven the one SetUp made: a file mounted there,
	// a mount on a Default volume, one whose identity or source is not
	// the recorded one, one that is not the whole filesystem SetUp made.
	// Remedy: unmount it; it is not the volume's.
	ReasonForeignMount
	// ReasonNoRecord (ActionRefuse): a mount on the volume directory, and
	// no record of SetUp making it that could prove it the volume's own
	// (a volume set up by a stock kubelet or an older nodevol, or a
	// foreign mount). Remedy: if it is the volume's own tmpfs or hugetlbfs,
	// unmount it by hand.
	ReasonNoRecord
	// ReasonMetadataUnreadable (ActionRefuse): a mount on the volume
	// directory, and the volume's metadata cannot be read (Reason quotes
	// the error) to prove it the volume's own. Remedy: the metadata error
	// says.
	ReasonMetadataUnreadable
	// ReasonMountChanged (ActionRefuse): a mount appeared on the volume
	// directory, or the one there changed, while it was examined. The
	// next try examines it again.
	ReasonMountChanged
)

func (c ReasonCode) String() string {
	switch c {
	case ReasonMissing:
		return "missing"
	case ReasonNotMounted:
		return "not-mounted"
	case ReasonMountGone:
		return "mount-gone"
	case ReasonSymlink:
		return "symlink"
	case ReasonFile:
		return "file"
	case ReasonOwnMount:
		return "own-mount"
	case ReasonNestedMounts:
		return "nested-mounts"
	case ReasonUncertain:
		return "uncertain"
	case ReasonMountElsewhere:
		return "mount-elsewhere"
	case ReasonStackedMounts:
		return "stacked-mounts"
	case ReasonForeignMount:
		return "foreign-mount"
	case ReasonNoRecord:
		return "no-record"
	case ReasonMetadataUnreadable:
		return "metadata-unreadable"
	case ReasonMountChanged:
		return "mount-changed"
	case ReasonAdoptedMount:
		return "adopted-mount"
	}
	return fmt.Sprintf("ReasonCode(%d)", int(c))
}

// MarshalText prints the code's name.
func (c ReasonCode) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// Plan is what TearDown found on disk and will do. PlanTearDown computes it
// without changing anything (a dry run); TearDown computes it and acts.
type Plan struct {
	Path   string
	Exists bool
	// Info is what mountdetect says about the open volume directory (when
	// it is one).
	Info mountdetect.FSInfo
	// meta is the metadata SetUp recorded, or nil; MetaErr says why it
	// could not be read (TearDown then stops before removing anything, so
	// that a recorded quota cannot leak).
	meta    *metadata
	metaErr error
	Action  Action
	// Mounts lists the mounts that make Action ActionRefuse: every mount
	// beneath Path, or the mounts on Path itself (all of them when several
	// are stacked) when they are not provably the volume's own, or Path
	// when its mount status is uncertain.
	Mounts []mountdetect.Mount
	// Code says why, for programs; Reason in words, with the details
	// (short: the mounts are in Mounts); Remedy, for a refusal, what an
	// operator can do about it ("" when only a retry helps).
	Code   ReasonCode
	Reason string
	Remedy string
}

// ErrUnexpectedMetadata is matched by the error for a metadata directory
// that holds something neither nodevol nor the kubelet writes there (a
// directory named ready, a planted file): TearDown stops before changing
// anything, since it would not be able to remove the directory at the end.
var ErrUnexpectedMetadata = errors.New("unexpected entries in the volume's metadata directory")

// ErrForeignMount is matched by the error of Usage for a volume whose
// directory has a mount on it that SetUp did not make (or cannot prove it
// made): it is not measured, nor asked anything.
var ErrForeignMount = errors.New("a mount that is not the volume's own")

// RefusedError is returned by TearDown when it refuses; it wraps a
// *mountdetect.CrossesMountError, so errors.Is(err,
// mountdetect.ErrCrossesMount) holds and errors.As gives the mounts.
type RefusedError struct {
	Plan Plan
	Err  error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("emptyDir teardown of %s refused: %s: %v", e.Plan.Path, e.Plan.Reason, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// PlanTearDown examines the emptyDir volume vol of the pod podUID and says
// what TearDown would do. It changes nothing. tab, when not nil, answers
// the mount-table questions (a scan of many volumes reads the table once);
// nil reads the kernel's table now. See FromAnotherMountNamespace for a
// plugin that plans from another mount namespace than the kubelet's.
//
// Like TearDown it reaches the volume and its metadata by descriptors from
// the kubelet root: a symlink anywhere below the root where a directory
// belongs is an error naming it.
//
// A refusal is a plan (Action ActionRefuse), not an error. Metadata that
// cannot be read is the plan's MetaErr; when TearDown would stop on it
// before changing anything (it is not a refusal anyway) it is also the
// error, so that a dry run fails exactly where TearDown would.
func (p *Plugin) PlanTearDown(podUID, vol string, tab *mountdetect.MountTable) (Plan, error) {
	plan, err := p.planTearDown(p.planRef(podUID, vol), tab)
	return plan, p.endPlan(&plan, err)
}

// endPlan is the error of a plan made with err: err, or, for a plan that
// is not a refusal, where TearDown would stop before changing anything
// (PlanTearDown).
func (p *Plugin) endPlan(plan *Plan, err error) error {
	if err == nil && plan.Action != ActionRefuse {
		_, err = p.stop(plan)
	}
	return err
}

// planRef is the ordinary volume vol of the pod podUID as PlanTearDown
// and a Planner examine it.
func (p *Plugin) planRef(podUID, vol string) volRef {
	r := ordinaryRef(podUID, vol)
	r.anyMountNamespace = p.anyMountNamespace
	return r
}

// stop is the error TearDown would stop with before changing anything,
// and its kind: a refusal, metadata that cannot be read (or a metadata
// directory it could not remove at the end), or a recorded quota project
// without a quota manager to clear it. nil when TearDown would go ahead.
func (p *Plugin) stop(plan *Plan) (volume.FailureKind, error) {
	if err := plan.refusal(); err != nil {
		return volume.Transient, err
	}
	if plan.meta.hasQuota() && p.quotas == nil && plan.Action != ActionUnmountAndRemove {
		return volume.Final, fmt.Errorf("the volume has %s but no quota manager is configured; refusing to leak it", plan.meta.describeQuota())
	}
	return 0, nil
}

// TearDownVolume tears down the emptyDir volume vol of the pod podUID,
// exactly as the plugin's Unmounter does, and returns the plan it acted
// on (what it found and did). It is what `nodevol teardown` runs on a
// volume directory given on the command line.
func (p *Plugin) TearDownVolume(ctx context.Context, podUID, vol string) (Plan, error) {
	return p.tearDown(ctx, ordinaryRef(podUID, vol))
}

type unmounter struct {
	plugin *Plugin
	podUID string
	vol    string
	ref    volRef
	dir    string
}

func (u *unmounter) Path() string { return u.dir }

// TearDown removes the volume, in this order: nothing there is success;
// what is on disk is examined and compared with what SetUp recorded; any
// mount beneath the volume, a mount on it that is not the one SetUp made
// (or two stacked), or metadata that cannot be read is refused and
// nothing changes — the ready marker and metadata stay, so a retry or a
// restart sees the same state; the volume's own tmpfs or hugetlbfs is
// unmounted (no lazy detach) and its directory removed; a Default volume's
// quota is cleared and the directory removed with mountdetect.RemoveAll.
// The metadata goes last.
func (u *unmounter) TearDown(ctx context.Context) error {
	_, err := u.plugin.tearDown(ctx, u.ref)
	return err
}

// The emptyDir unmounter says whether its teardown would be refused
// before the volume manager changes anything (its subpaths).
var _ volume.TearDownChecker = (*unmounter)(nil)

// CheckTearDown returns the error TearDown would refuse with, without
// changing anything (nil when TearDown would go ahead). The volume manager
// runs it, and the subpath check, before it changes anything.
func (u *unmounter) CheckTearDown(ctx context.Context) error {
	plan, err := u.plugin.planTearDown(u.ref, nil)
	if err != nil {
		return &volume.OperationError{Kind: volume.Transient, Op: "TearDown", Path: u.dir, Err: err}
	}
	if kind, err := u.plugin.stop(&plan); err != nil {
		return &volume.OperationError{Kind: kind, Op: "TearDown", Path: u.dir, Err: err}
	}
	return nil
}

// refusal is the error a plan that refuses stands for, nil otherwise.
func (p *Plan) refusal() error {
	if p.Action == ActionRefuse {
		var err error = &mountdetect.CrossesMountError{Path: p.Path, Mounts: p.Mounts}
		if p.metaErr != nil {
			// The reason quotes it already; it is wrapped for errors.Is.
			err = &withCause{err, p.metaErr}
		}
		return &RefusedError{Plan: *p, Err: err}
	}
	if p.metaErr != nil {
		return fmt.Errorf("read metadata: %w", p.metaErr)
	}
	return nil
}

// withCause reads as err, and unwraps to err and cause.
type withCause struct{ err, cause error }

func (e *withCause) Error() string   { return e.err.Error() }
func (e *withCause) Unwrap() []error { return []error{e.err, e.cause} }

// Planner plans the teardowns of many volumes, as PlanTearDown does each
// one, for a caller that examines a node's volumes pod after pod (a
// scan): the kubelet root and the pods directory are opened once, at the
// first pod, and the directories a pod's volumes share — the pod
// directory, its emptyDir volumes directory and its emptyDir metadata
// directory — once for the consecutive volumes of one pod, by descriptors
// as PlanTearDown opens them, and each volume's metadata directory
// relative to them. A volume directory itself is looked at by a statx of
// its name and, where the mount table answers what the plan asks, not
// opened: in a mount namespace other than the kubelet's, a descriptor on
// a Memory volume's tmpfs (a propagated copy there) would make the
// kubelet's unmount of it fail with EBUSY. Nothing is resolved by name
// twice: a pod directory renamed or replaced between two of its volumes
// is not followed, the volumes are examined in the directory that was
// opened (their paths name it as it was listed). A caller that lists the
// volumes with volume.Layout.ScanVolumes plans them with PlanListed,
// through the pod and plugin directories the listing holds open.
//
// The plans are PlanTearDown's, checks included. A Planner is not safe
// for concurrent use; Close releases its descriptors.
type Planner struct {
	p    *Plugin
	held *podVolume // the last pod's shared directories; its meta is nil
	// root and pods are the kubelet root and its pods directory, opened
	// at the first pod and kept for the others (nil until then); podsAs
	// is pods as a mountdetect.Parent, read once; listedAs is the plugin
	// directory PlanListed plans in, beneath it (each listing reuses it).
	root, pods *fsat.Dir
	podsAs     *mountdetect.Parent
	listedAs   mountdetect.Parent
	// records is the last record decoded (readMeta).
	records recordMemo
}

// NewPlanner returns a Planner of the plugin's volumes.
func (p *Plugin) NewPlanner() *Planner { return &Planner{p: p} }

// PlanTearDown is Plugin.PlanTearDown of the volume vol of the pod podUID.
func (pl *Planner) PlanTearDown(podUID, vol string, tab *mountdetect.MountTable) (Plan, error) {
	return pl.PlanTearDownWithin(podUID, vol, tab, nil)
}

// PlanTearDownWithin is PlanTearDown for a scan that bounds what it reads
// of each pod (volume.ScanVolumes): b is the pod's budget (nil: none).
// The entries of the volume's metadata directory other than the two
// nodevol and the kubelet write there (the record and the ready marker,
// paid for with the volume's own entry) are charged to b; once it is
// spent, the plan is an error matching volume.ErrTooManyEntries and the
// rest of the directory is not read. Whoever writes in a pod directory
// can fill every metadata directory of the pod: what that costs a scan
// comes out of the pod's share, no one else's.
func (pl *Planner) PlanTearDownWithin(podUID, vol string, tab *mountdetect.MountTable, b *volume.EntryBudget) (Plan, error) {
	plan, err := pl.planTearDown(pl.p.planRef(podUID, vol), tab, b)
	return plan, pl.p.endPlan(&plan, err)
}

// PlanListed plans the teardowns of the volumes of pd, a plugin directory
// volume.Layout.ScanVolumes lists under the plugin's kubelet root and hands
// on (volume.WithPluginDir), as PlanTearDown plans each one, and calls fn
// with each volume's index in pd.Volumes and its plan, in order.
//
// When pd is a pod's emptyDir plugin directory, its volumes are planned
// through the descriptors the listing holds, borrowed for the duration of
// the call: the pod directory (pd.Pod) and the plugin directory (pd.Fd)
// are neither opened again nor their names resolved a second time, and
// each volume's metadata directory is opened from that pod directory. The
// volumes planned, and their records, are those of the pod directory that
// was listed, even if it was renamed or replaced since (the plans' paths
// name them as listed). The Planner never closes what it borrows and
// keeps nothing of it past the call: what it opens from it (the metadata
// directories) is closed before PlanListed returns, and fn must not keep
// pd's descriptors either. Any other pd is planned as PlanTearDown plans
// its volumes, by name. Either way, pd.Budget (the pod's, of a bounded
// listing) is charged as PlanTearDownWithin charges it.
func (pl *Planner) PlanListed(pd volume.PluginDir, tab *mountdetect.MountTable, fn func(i int, plan Plan, err error)) {
	uid, pod, ok := listedPod(pd)
	if !ok {
		for i, vd := range pd.Volumes {
			plan, err := pl.PlanTearDownWithin(vd.PodUID, vd.Volume, tab, pd.Budget)
			fn(i, plan, err)
		}
		return
	}
	pl.planListed(pd, uid, pod, tab, fn)
}

// listedPod is the pod UID of pd and the path of its pod directory, when
// pd is a pod's emptyDir plugin directory handed on with its pod directory,
// every volume in it (ok).
func listedPod(pd volume.PluginDir) (uid, pod string, ok bool) {
	// Descriptor 0 is never taken for a directory borrowed: it is what a
	// PluginDir made by hand with Pod or Fd unset holds (standard input,
	// or whatever was opened in its place). Planned by name, it costs
	// nothing but the opens.
	if len(pd.Volumes) == 0 || pd.Fd <= 0 || pd.Pod <= 0 {
		return "", "", false
	}
	uid = pd.Volumes[0].PodUID
	if volume.ValidatePodUID(uid) != nil || len(pd.Rel) != len(uid)+len(listedSuffix) ||
		pd.Rel[:len(uid)] != uid || pd.Rel[len(uid):] != listedSuffix || !strings.HasSuffix(pd.Path, listedSuffix) {
		return "", "", false
	}
	for _, vd := range pd.Volumes {
		if vd.PodUID != uid || vd.Plugin != PluginName {
			return "", "", false
		}
	}
	return uid, strings.TrimSuffix(pd.Path, listedSuffix), true
}

// Close closes the directories the Planner holds.
func (pl *Planner) Close() {
	pl.closeHeld()
	pl.pods.Close()
	pl.root.Close()
	pl.root, pl.pods, pl.podsAs = nil, nil, nil
}

// closeHeld closes the last pod's directories (not root and pods).
func (pl *Planner) closeHeld() {
	if pl.held != nil {
		pl.held.Close()
		pl.held = nil
	}
}
