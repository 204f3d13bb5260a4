package emptydir

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/klog/v2"

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

// Plan is what TearDown found on disk and will do. PlanTearDown computes it
// without changing anything (a dry run); TearDown computes it and acts.
type Plan struct {
	Path    string
	MetaDir string
	Exists  bool
	// Info is what mountdetect.Detect says about Path (when it exists).
	Info mountdetect.FSInfo
	// Meta is the metadata SetUp recorded, or nil; MetaErr says why it
	// could not be read (TearDown then stops before removing anything, so
	// that a recorded quota cannot leak).
	Meta    *Metadata
	MetaErr error
	Action  Action
	// Mounts lists the mounts that make Action ActionRefuse: every mount
	// beneath Path, or Path itself when a foreign filesystem is mounted on
	// it or its mount status is uncertain.
	Mounts []mountdetect.Mount
	// Reason says why, in words.
	Reason string
}

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

// PlanTearDown examines an emptyDir volume directory and its metadata
// directory and says what TearDown would do. It changes nothing. tab, when
// not nil, answers the mount-table questions (a scan of many volumes reads
// the table once); nil reads the kernel's table now.
func PlanTearDown(dir, metaDir string, tab *mountdetect.MountTable) (Plan, error) {
	p := Plan{Path: dir, MetaDir: metaDir}
	p.Meta, p.MetaErr = readMetadata(metaDir) // unreadable metadata does not stop a plan
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		p.Action, p.Reason = ActionNone, "the volume directory does not exist"
		return p, nil
	}
	if err != nil {
		return p, err
	}
	p.Exists = true
	if fi.Mode()&os.ModeSymlink != 0 {
		// Not what SetUp makes; RemoveAll unlinks the link and never
		// follows it.
		p.Action, p.Reason = ActionRemove, "the volume path is a symlink; it is unlinked, not followed"
		return p, nil
	}
	detect, nestedMounts := mountdetect.Detect, mountdetect.NestedMounts
	if tab != nil {
		detect, nestedMounts = tab.Detect, tab.NestedMounts
	}
	if p.Info, err = detect(dir); err != nil {
		return p, err
	}
	if fi.IsDir() {
		nested, err := nestedMounts(dir)
		if err != nil {
			return p, err
		}
		if len(nested) > 0 {
			p.Action, p.Mounts = ActionRefuse, nested
			p.Reason = fmt.Sprintf("%d %s beneath the volume; unmount %s first (their data is not the volume's)",
				len(nested), plural(len(nested), "mount", "mounts"), plural(len(nested), "it", "them"))
			return p, nil
		}
	}
	switch {
	case !p.Info.MountPointSure:
		p.Action = ActionRefuse
		p.Mounts = []mountdetect.Mount{{MountPoint: dir, FSType: p.Info.FSType}}
		p.Reason = "the kernel cannot say for sure whether the volume directory is a mount point"
	case p.Info.MountPoint && (p.Info.Medium == mountdetect.MediumMemory || p.Info.Medium == mountdetect.MediumHugePages):
		p.Action, p.Reason = ActionUnmountAndRemove, "the volume is a "+p.Info.FSType+" mount ("+p.Info.Medium.String()+" medium)"
	case p.Info.MountPoint:
		p.Action = ActionRefuse
		p.Mounts = []mountdetect.Mount{{MountPoint: dir, FSType: p.Info.FSType}}
		p.Reason = "a filesystem of type " + p.Info.FSType + " is mounted on the volume directory itself, which no emptyDir medium does"
	default:
		p.Action, p.Reason = ActionRemove, "a Default-medium volume on "+p.Info.FSType
	}
	return p, nil
}

type unmounter struct {
	plugin  *Plugin
	dir     string
	metaDir string
}

func (u *unmounter) Path() string { return u.dir }

// TearDown removes the volume, in this order: nothing there is success;
// the medium is detected on disk; any mount beneath the volume (or a
// foreign mount on it) is refused and nothing changes — the ready marker
// and metadata stay, so a retry or a restart sees the same state; a tmpfs
// or hugetlbfs volume is unmounted (no lazy detach) and its directory
// removed; a Default volume's quota is cleared and the directory removed
// with mountdetect.RemoveAll. The metadata goes last.
func (u *unmounter) TearDown(ctx context.Context) error {
	_, err := tearDown(ctx, u.dir, u.metaDir, u.plugin.mounter(), u.plugin.quotas)
	return err
}

// TearDownPath tears down the emptyDir volume at dir whose metadata lives
// in metaDir, exactly as the plugin's Unmounter does, and returns the plan
// it acted on (what it found and did). mounter and quotas may be nil (the
// OS mounter; no quotas). It is what `nodevol teardown` runs on a volume
// directory given on the command line.
func TearDownPath(ctx context.Context, dir, metaDir string, mounter volume.SystemMounter, quotas Quotas) (Plan, error) {
	if mounter == nil {
		mounter = osMounter{}
	}
	return tearDown(ctx, dir, metaDir, mounter, quotas)
}

func tearDown(ctx context.Context, dir, metaDir string, mounter volume.SystemMounter, quotas Quotas) (Plan, error) {
	logger := klog.FromContext(ctx).WithValues("volume", dir)
	fail := func(kind volume.FailureKind, err error) error {
		return &volume.OperationError{Kind: kind, Op: "TearDown", Path: dir, Err: err}
	}
	plan, err := PlanTearDown(dir, metaDir, nil)
	if err != nil {
		return plan, fail(volume.Transient, err)
	}
	if plan.MetaErr != nil && plan.Action != ActionRefuse {
		// Without the metadata a recorded quota could leak: stop here.
		return plan, fail(volume.Transient, fmt.Errorf("read metadata: %w", plan.MetaErr))
	}
	switch plan.Action {
	case ActionRefuse:
		crossing := &mountdetect.CrossesMountError{Path: dir, Mounts: plan.Mounts}
		logger.Info("Refusing emptyDir teardown", "reason", plan.Reason, "mounts", len(plan.Mounts))
		return plan, fail(volume.Transient, &RefusedError{Plan: plan, Err: crossing})
	case ActionUnmountAndRemove:
		if err := mounter.Unmount(dir); err != nil {
			return plan, fail(volume.Uncertain, fmt.Errorf("unmount %s: %w", plan.Info.FSType, err))
		}
		logger.V(2).Info("Unmounted emptyDir", "fsType", plan.Info.FSType)
		if err := removeTree(dir); err != nil {
			return plan, fail(volume.Transient, err)
		}
	case ActionRemove, ActionNone:
		// ActionNone too: the directory is gone (removed by hand, or a
		// crash), but the metadata is the last record of its project ID;
		// removing it without clearing would leak the ID in the
		// bookkeeping files forever (Clear of a missing directory only
		// undoes the bookkeeping).
		if plan.Meta != nil && plan.Meta.QuotaProjectID != 0 {
			if quotas == nil {
				return plan, fail(volume.Final, fmt.Errorf("the volume has quota project %d but no quota manager is configured; refusing to leak it", plan.Meta.QuotaProjectID))
			}
			if err := quotas.Clear(dir); err != nil {
				return plan, fail(volume.Transient, fmt.Errorf("clear quota project %d: %w", plan.Meta.QuotaProjectID, err))
			}
		}
		if plan.Action == ActionRemove {
			if err := removeTree(dir); err != nil {
				return plan, fail(volume.Transient, err)
			}
		}
	}
	if err := removeMetadata(metaDir); err != nil {
		return plan, fail(volume.Transient, fmt.Errorf("remove metadata: %w", err))
	}
	logger.V(2).Info("emptyDir torn down", "action", plan.Action)
	return plan, nil
}

// removeTree is mountdetect.RemoveAll, whose refusal (a mount that
// appeared since the plan) is wrapped like a planned refusal.
func removeTree(dir string) error {
	err := mountdetect.RemoveAll(dir)
	var crossing *mountdetect.CrossesMountError
	if errors.As(err, &crossing) {
		return &RefusedError{Plan: Plan{Path: dir, Action: ActionRefuse, Mounts: crossing.Mounts, Reason: "a mount appeared beneath the volume"}, Err: err}
	}
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
