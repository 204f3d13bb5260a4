package emptydir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/plural"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func (p *Plugin) planTearDown(r volRef, tab *mountdetect.MountTable) (Plan, error) {
	dir, err := p.refPath(r)
	if err != nil {
		return Plan{}, err
	}
	v, err := p.openVolume(r, false)
	if err != nil {
		return Plan{Path: dir}, err
	}
	defer v.Close()
	plan, e, err := v.plan(tab)
	e.Close()
	return plan, err
}

// planTearDown is Plugin.planTearDown of the ordinary volume r, with the
// directories it shares with the previous volume reused when both are the
// same pod's; b is the pod's budget (PlanTearDownWithin).
func (pl *Planner) planTearDown(r volRef, tab *mountdetect.MountTable, b *volume.EntryBudget) (Plan, error) {
	dir, err := pl.p.refPath(r)
	if err != nil {
		return Plan{}, err
	}
	var v *podVolume
	if pl.held != nil && pl.held.ref.podUID == r.podUID {
		v, err = pl.held.sibling(r, dir)
	} else {
		pl.closeHeld()
		if v, err = pl.openPod(r); err == nil {
			pl.held = v
		}
	}
	if err != nil {
		return Plan{Path: dir}, err
	}
	if v.looker == nil && v.vols != nil && tab != nil {
		// Once per pod: its volumes are then looked at, not opened. The
		// pod and volumes directories are opened SameMount from pods.
		if podsAs := pl.podsParent(tab); podsAs != nil {
			looker := podsAs.Beneath(v.volsFromPods)
			v.looker = &looker
			pl.held.looker = v.looker
		}
	}
	v.budget, v.records = b, &pl.records
	defer func() {
		v.meta.Close()
		v.meta, v.budget, v.records = nil, nil, nil
	}()
	plan, e, err := v.plan(tab)
	e.Close()
	return plan, err
}

// podsParent is the Planner's pods directory as a mountdetect.Parent,
// read once; nil when it cannot be read (volumes are then opened, not
// looked at).
func (pl *Planner) podsParent(tab *mountdetect.MountTable) *mountdetect.Parent {
	if pl.podsAs == nil && pl.pods != nil {
		if podsAs, err := tab.Parent(pl.pods.Fd(), pl.pods.Path()); err == nil {
			pl.podsAs = podsAs
		}
	}
	return pl.podsAs
}

// openTop opens the kubelet root and its pods directory for the Planner
// unless it holds them already (nothing when they cannot be opened, or
// when there is no pods directory: a Planner that kept a root without
// one would plan every later volume as missing).
func (pl *Planner) openTop() {
	if pl.root != nil {
		return
	}
	root, err := fsat.OpenRoot(pl.p.host.Layout().Root())
	if err != nil {
		return
	}
	pods, err := openOrCreate(root, "pods", false)
	if err != nil || pods == nil {
		root.Close()
		return
	}
	pl.root, pl.pods = root, pods
}

// planListed is PlanListed of pd, the emptyDir plugin directory of the pod
// uid, whose directory path names (and pd.Pod is): its pod and plugin
// directories are borrowed, each metadata directory opened from the pod
// directory borrowed and closed before the next.
func (pl *Planner) planListed(pd volume.PluginDir, uid, path string, tab *mountdetect.MountTable, fn func(int, Plan, error)) {
	// What the Planner holds of a pod it opened by name is never mixed
	// with what a listing lends.
	pl.closeHeld()
	// The borrowed directories join the tree of the Planner's kubelet
	// root, so the records read below them share its /proc/self/fd
	// descriptor (a reopen walks one component, not four).
	pl.openTop()
	v := podVolume{pod: pl.root.Borrow(pd.Pod, path), vols: pl.root.Borrow(pd.Fd, pd.Path), hook: pl.p.hook,
		topShared: true, volsFromPods: pd.Rel, budget: pd.Budget, records: &pl.records}
	defer v.Close() // the borrowed descriptors stay open
	if tab != nil {
		if podsAs := pl.podsParent(tab); podsAs != nil {
			pl.listedAs = podsAs.Beneath(pd.Rel)
			v.looker = &pl.listedAs
		}
	}
	for i, vd := range pd.Volumes {
		plan, err := pl.planIn(&v, vd, tab)
		fn(i, plan, pl.p.endPlan(&plan, err))
	}
}

// planIn plans the volume vd of the pod whose directories v holds, which
// it leaves as it found them: only vd's metadata directory is opened (in
// one openat2 from the pod directory: the metadata-parent directory is
// not opened on its own), and closed before it returns.
func (pl *Planner) planIn(pod *podVolume, vd volume.VolumeDir, tab *mountdetect.MountTable) (Plan, error) {
	r := pl.p.planRef(vd.PodUID, vd.Volume)
	if err := volume.ValidateVolumeDirName(vd.Volume); err != nil {
		return Plan{}, err
	}
	v := *pod
	v.ref, v.name, v.metaName, v.dir = r, r.dir, r.meta, vd.Path
	var err error
	if v.meta, err = openOrCreate(pod.pod, "plugins/"+escapedPluginName+"/"+r.meta, false, fsat.SameMount); err != nil {
		return Plan{Path: v.dir}, err
	}
	defer v.meta.Close()
	plan, e, err := v.plan(tab)
	e.Close()
	return plan, err
}

// openPod opens the directories of the volume r, the first of its pod,
// from the kubelet root and pods directory the Planner keeps (opened at
// its first pod, then owned by the Planner).
func (pl *Planner) openPod(r volRef) (*podVolume, error) {
	if pl.root != nil {
		return pl.p.openVolumeIn(r, false, pl.root, pl.pods)
	}
	v, err := pl.p.openVolume(r, false)
	if err == nil && v.root != nil && v.pods != nil {
		pl.root, pl.pods, v.topShared = v.root, v.pods, true
	}
	return v, err
}

// plan examines the volume and compares it with the record. The entry it
// returns holds the volume directory open when it is one; the caller
// closes it (before unmounting: an open file keeps a mount busy).
func (v *podVolume) plan(tab *mountdetect.MountTable) (Plan, entry, error) {
	p := Plan{Path: v.dir}
	// Unreadable metadata does not stop a plan; its error comes before
	// the listing's. A listing that shows no record spares the open.
	maybeRecord, dirErr := v.checkMetadataDir()
	if errors.Is(dirErr, volume.ErrTooManyEntries) {
		return p, entry{Entry: mountdetect.Entry{Fd: -1}}, dirErr
	}
	if maybeRecord {
		p.meta, p.metaErr = v.readMeta()
	}
	if p.metaErr == nil {
		p.metaErr = dirErr
	}
	e, err := v.lookEntry(tab)
	if err != nil {
		return p, e, err
	}
	refuse := func(code ReasonCode, reason, remedy string, mounts []mountdetect.Mount) (Plan, entry, error) {
		p.Action, p.Code, p.Reason, p.Remedy, p.Mounts = ActionRefuse, code, reason, remedy, mounts
		return p, e, nil
	}
	act := func(a Action, code ReasonCode, reason string) (Plan, entry, error) {
		p.Action, p.Code, p.Reason = a, code, reason
		return p, e, nil
	}
	// The volume directory itself, for a refusal of what is on it.
	self := func(fsType string) []mountdetect.Mount {
		return []mountdetect.Mount{{MountPoint: v.dir, FSType: fsType}}
	}
	if !(e.kind == entryDir && e.Root) {
		// The volume directory is not a mount: if the recorded mount is
		// still mounted somewhere (the directory was renamed, or the
		// mount moved, by someone who can write in the pod directory),
		// dropping the record would leave it mounted for good, unprovable.
		elsewhere, err := recordedMountElsewhere(p.meta, v.ref, &tab)
		if err != nil {
			return p, e, err
		}
		if len(elsewhere) > 0 {
			p.Exists = e.kind != entryMissing
			return refuse(ReasonMountElsewhere, movedReason(elsewhere), movedRemedy, elsewhere)
		}
	}
	switch e.kind {
	case entryMissing:
		return act(ActionNone, ReasonMissing, "the volume directory does not exist")
	case entrySymlink:
		// Not what SetUp makes; it is unlinked, never followed.
		p.Exists = true
		return act(ActionRemove, ReasonSymlink, "the volume path is a symlink; it is unlinked, not followed")
	case entryOther:
		p.Exists = true
		if e.Root {
			return refuse(ReasonForeignMount, "a file is mounted on the volume path", "unmount it, then tear down again", self(""))
		}
		return act(ActionRemove, ReasonFile, "the volume path is a file, not a directory; it is unlinked")
	}
	p.Exists = true
	if tab, err = tab.OrRead(); err != nil {
		return p, e, err
	}
	var at, beneath []mountdetect.Mount
	if e.fromTable {
		at, beneath = e.known.at, e.known.beneath
	} else if at, beneath, err = tab.MountsAtEntry(e.Entry); err != nil {
		return p, e, err
	}
	switch {
	case e.Root:
		// Nothing is asked of a filesystem mounted on the directory (a
		// FUSE daemon may not answer) before it is proven the volume's
		// own: what it is comes from the mount table.
		p.Info = infoOnDir(tab, e)
	case e.fromTable:
		p.Info = e.known.info
	default:
		if p.Info, err = tab.DetectEntry(e.Entry); err != nil {
			return p, e, err
		}
	}
	if n := len(beneath); n > 0 {
		return refuse(ReasonNestedMounts, plural.Count(n, "mount")+" beneath the volume",
			"unmount "+plural.Of(n, "it", "them")+" first (their data is not the volume's)", beneath)
	}
	if !p.Info.MountPointSure {
		return refuse(ReasonUncertain, "the kernel cannot say for sure whether the volume directory is a mount point", "", self(p.Info.FSType))
	}
	if !e.Root {
		if len(at) > 0 {
			// The directory was opened before a mount appeared on it.
			return refuse(ReasonMountChanged, "a mount appeared on the volume directory while it was examined", "", at)
		}
		if p.meta != nil && p.meta.Medium != volume.MediumDefault {
			return act(ActionRemove, ReasonMountGone, "the volume's "+p.meta.Medium.String()+"-medium mount is already gone; the directory is removed")
		}
		return act(ActionRemove, ReasonNotMounted, "a Default-medium volume on "+p.Info.FSType)
	}
	if len(at) == 0 {
		at = []mountdetect.Mount{{MountPoint: v.dir, FSType: p.Info.FSType}}
	}
	// What is mounted on the directory (type, source) is in Mounts, named
	// as mountdetect names mounts: a source and a FUSE type are chosen by
	// whoever mounted them.
	const notOurs = "unmount it: it is not the volume's"
	switch {
	case len(at) > 1:
		return refuse(ReasonStackedMounts, fmt.Sprintf("%d mounts are stacked on the volume directory", len(at)),
			"unmount all but the volume's own: only a single mount that SetUp made is ever unmounted", at)
	case p.metaErr != nil:
		return refuse(ReasonMetadataUnreadable, "a filesystem is mounted on the volume directory itself and the volume's metadata cannot be read ("+p.metaErr.Error()+"), so it cannot be proven the volume's own", "", at)
	case p.meta == nil:
		return refuse(ReasonNoRecord, "a filesystem is mounted on the volume directory itself, but nodevol has no record of mounting it", unmountByHand, at)
	case p.meta.Medium == volume.MediumDefault:
		return refuse(ReasonForeignMount, "a filesystem is mounted on the directory of a Default-medium volume, which SetUp never does", notOurs, at)
	case p.meta.Mount == nil:
		return refuse(ReasonNoRecord, "a filesystem is mounted on the volume directory itself, but SetUp recorded no mount identity that could prove it the volume's own (metadata written by an older nodevol)", unmountByHand, at)
	case !p.meta.Mount.Adopted && !isNodevolSource(p.meta.Mount.Source):
		return refuse(ReasonNoRecord, "a filesystem is mounted on the volume directory itself, but "+unknownSourceRecord(p.meta.Mount), newerRecordRemedy, at)
	case !p.meta.Mount.provenBy(e.MountStat, at[0].FSType, at[0].Source, v.ref):
		return refuse(ReasonForeignMount, fmt.Sprintf("the mount on the volume directory (%s) is not the mount SetUp made (%s)",
			describeMount(e.MountStat), p.meta.Mount.describe()), notOurs, at)
	}
	if code, why, others := soleWholeMount(tab, p.meta.Mount, e.ID, ""); why != "" {
		remedy := notOurs
		if code == ReasonMountElsewhere {
			remedy = "unmount the others first: unmounting the directory's would leave it mounted with no record"
		}
		return refuse(code, why, remedy, append(at, others...))
	}
	if p.meta.Mount.Pending {
		// Proven by its source alone: the checks around umount2 hold it
		// to the IDs seen now.
		meta := *p.meta
		rec := p.meta.Mount.pin(e.MountStat)
		meta.Mount = &rec
		p.meta = &meta
	}
	// Proven the volume's own tmpfs or hugetlbfs: now it may be asked
	// (a tmpfs not opened is what the table says: infoOnDir).
	if !e.fromTable {
		if info, err := tab.DetectEntry(e.Entry); err == nil {
			p.Info = info
		}
	}
	if p.meta.Mount.Adopted {
		return act(ActionUnmountAndRemove, ReasonAdoptedMount, "the volume's own "+at[0].FSType+" mount ("+p.meta.Medium.String()+" medium), mounted by the kubelet before nodevol and adopted")
	}
	return act(ActionUnmountAndRemove, ReasonOwnMount, "the volume's own "+at[0].FSType+" mount ("+p.meta.Medium.String()+" medium)")
}

// unmountByHand is the remedy for a mount on the volume directory that no
// record proves the volume's own.
const unmountByHand = "if it is the volume's own tmpfs or hugetlbfs (a volume set up by another kubelet), unmount it yourself, then tear down again"

// unknownSourceRecord says that rec's source is in no form this version
// makes, so that nothing mounted can be proven to be rec's mount.
func unknownSourceRecord(rec *mountRecord) string {
	return fmt.Sprintf("the volume's record names its mount by a source in no form this version of nodevol makes (%q: a record written by a newer version, rolled back since?), so the mount cannot be proven the volume's own", rec.Source)
}

// newerRecordRemedy is the remedy for a mount whose record this version
// cannot read.
const newerRecordRemedy = "run the nodevol version that set the volume up (roll forward), or, if it is the volume's own tmpfs or hugetlbfs, unmount it yourself; then tear down again"

// movedRemedy is the remedy for a volume whose own mount is elsewhere.
const movedRemedy = "move it back or unmount it, then tear down again: it is never unmounted elsewhere"

// recordedMountElsewhere lists where the mount meta records is mounted,
// found in the mount table by its source (a unique random name SetUp gave
// it); the callers know that it is not on the volume directory. None when
// meta records no provable mount. Only a source made for the volume r
// counts: a record forged to name another volume's source must not make
// that volume's mount this one's. *tab is read when nil.
//
// An adopted mount, whose source is the kubelet's, is found by its unique
// mount ID instead (adoptedElsewhere).
func recordedMountElsewhere(meta *metadata, r volRef, tab **mountdetect.MountTable) ([]mountdetect.Mount, error) {
	if meta != nil && meta.Mount != nil && meta.Mount.Adopted {
		return adoptedElsewhere(meta.Mount)
	}
	if meta == nil || meta.Mount == nil || !isSourceFor(meta.Mount.Source, r) {
		return nil, nil
	}
	t, err := (*tab).OrRead()
	if err != nil {
		return nil, err
	}
	*tab = t
	var out []mountdetect.Mount
	for _, m := range t.MountsFromSource(meta.Mount.Source) {
		out = append(out, m.Mount)
	}
	return out, nil
}

// soleWholeMount checks the mount on the volume directory (mount ID onDir
// in this namespace) that the record rec proves by its identity: it must
// be the only mount of the recorded source anywhere in the table (a bind
// of the volume's tmpfs elsewhere, or the tmpfs itself moved away with a
// bind of it left in its place, would keep it mounted after the unmount,
// with no record left) and it must mount the filesystem's root (a bind of
// a subdirectory of it passes a superblock check). An adopted mount's
// source is the kubelet's, shared by every tmpfs it mounts: its mounts are
// those of its superblock. Mounts under subpaths (the pod's subPath
// directory of the volume, as subpathsPrefix names it; "": none) are not
// counted: SetUp allows the binds the kubelet makes there, TearDown runs
// after the kubelet removed them. why is "" when it is; else why not,
// with the code, and the other mounts.
func soleWholeMount(tab *mountdetect.MountTable, rec *mountRecord, onDir uint64, subpaths string) (code ReasonCode, why string, others []mountdetect.Mount) {
	whole := false
	for _, m := range tab.MountsFromSource(rec.Source) {
		switch {
		case uint64(m.ID) == onDir:
			whole = m.Root == "/"
			continue
		case rec.Adopted && m.Dev != rec.Dev:
			continue
		case subpaths != "" && strings.HasPrefix(m.MountPoint, subpaths):
			continue
		}
		others = append(others, m.Mount)
	}
	switch {
	case len(others) > 0:
		return ReasonMountElsewhere, fmt.Sprintf("the volume's own %s is also mounted elsewhere (a bind of it, or the %[1]s itself moved with a bind left in its place)", rec.FSType), others
	case !whole:
		return ReasonForeignMount, fmt.Sprintf("the %s on the volume directory is not the whole filesystem SetUp mounted (a bind of a part of it, or not in the mount table)", rec.FSType), nil
	}
	return 0, "", nil
}

// movedReason says why a volume whose mount is elsewhere (at) is left
// alone; at names where.
func movedReason(at []mountdetect.Mount) string {
	return fmt.Sprintf("the volume's own %s mount is no longer on the volume directory (renamed or moved)", at[0].FSType)
}

// describe names a recorded mount for messages.
func (rec *mountRecord) describe() string {
	s := fmt.Sprintf("%s from %s, mount ID %d", rec.FSType, rec.Source, rec.ID)
	if rec.UniqueID != 0 {
		s += fmt.Sprintf(" (unique %#x)", rec.UniqueID)
	}
	return s
}

// sameMount compares the identity statx gives, without the mount table:
// the unique mount ID where the kernel has them (a record without one does
// not match then), else the classic ID and the device.
func (rec *mountRecord) sameMount(mi fsat.MountStat, r volRef) bool {
	if rec.Adopted {
		return rec.sameAdopted(mi)
	}
	if r.anyMountNamespace {
		// Mount IDs are those of the namespace that made the mount; in
		// another one it is a propagated copy with IDs of its own. Its
		// superblock (device) is the same everywhere.
		return rec.Dev != 0 && rec.Dev == mi.Dev
	}
	if mi.UniqueID != 0 {
		return rec.UniqueID == mi.UniqueID
	}
	return rec.ID == mi.ID && rec.Dev == mi.Dev
}

func (p *Plugin) tearDown(ctx context.Context, r volRef) (Plan, error) {
	dir, err := p.refPath(r)
	if err != nil {
		return Plan{}, &volume.OperationError{Kind: volume.Final, Op: "TearDown", Err: err}
	}
	logger := logr.FromContextOrDiscard(ctx).WithValues("volume", dir)
	fail := func(kind volume.FailureKind, err error) error {
		return &volume.OperationError{Kind: kind, Op: "TearDown", Path: dir, Err: err}
	}
	v, err := p.openVolume(r, false)
	if err != nil {
		return Plan{Path: dir}, fail(volume.Transient, err)
	}
	defer v.Close()
	// The entry stays open for the quota's Clear, which acts on the
	// directory the plan examined, never on a name.
	plan, e, err := v.plan(nil)
	defer e.Close()
	if err != nil {
		return plan, fail(volume.Transient, err)
	}
	if kind, err := p.stop(&plan); err != nil {
		if plan.Action == ActionRefuse {
			logger.Info("Refusing emptyDir teardown", "code", plan.Code, "reason", plan.Reason, "mounts", len(plan.Mounts))
		}
		return plan, fail(kind, err)
	}
	if r.recordRequired && plan.meta == nil && plan.Action == ActionRemove {
		// Not made by SetUp here: only an empty directory goes (a SetUp
		// cut short before its record), anything else is not ours.
		err := fsat.Retry(func() error { return unix.Unlinkat(v.vols.Fd(), v.name, unix.AT_REMOVEDIR) })
		switch err {
		case nil, unix.ENOENT:
			plan.Action = ActionNone
		case unix.ENOTEMPTY, unix.EEXIST:
			return plan, fail(volume.Final, fmt.Errorf("%w: %s is not empty and no record says SetUp made it; nothing was removed", ErrNoRecord, dir))
		case unix.ENOTDIR:
			// A symlink or a file at the volume path: not an empty
			// directory either, and no retry changes that.
			return plan, fail(volume.Final, fmt.Errorf("%w: %s is not a directory and no record says SetUp made it; nothing was removed", ErrNoRecord, dir))
		default:
			return plan, fail(volume.Transient, &os.PathError{Op: "rmdir", Path: dir, Err: err})
		}
	}
	if plan.Action == ActionRemove && plan.meta != nil && plan.meta.Mount != nil {
		// The volume's mount is gone: a teardown that stopped after
		// unmounting it may have left its directory pinned.
		if err := unpinLeftover(e, dir); err != nil {
			return plan, fail(volume.Transient, fmt.Errorf("unpin the volume directory: %w", err))
		}
	}
	switch plan.Action {
	case ActionUnmountAndRemove:
		e.Close() // an open descriptor keeps the mount busy
		pinned, err := v.unmount(logger, plan)
		if err != nil {
			var refused *RefusedError
			if errors.As(err, &refused) {
				return refused.Plan, fail(volume.Transient, err)
			}
			return plan, fail(volume.Uncertain, err)
		}
		logger.V(2).Info("Unmounted emptyDir", "fsType", plan.Info.FSType)
		v.hook.At(testhook.TearDownUnmounted, dir)
		if pinned != nil {
			if err := pinned.release(); err != nil {
				return plan, fail(volume.Transient, fmt.Errorf("unpin the volume directory: %w", err))
			}
		}
		if err := v.removeTree(); err != nil {
			return plan, fail(volume.Transient, err)
		}
		v.hook.At(testhook.TearDownRemoved, dir)
	case ActionRemove, ActionNone:
		// ActionNone too: the directory is gone (removed by hand, or a
		// crash), but its project may still be recorded. Whatever the
		// record says (it is in the pod directory, where others write),
		// what the bookkeeping files record for the volume's path is
		// released: fsquota releases nothing else.
		// (Without a quota manager, stop has refused a recorded project.)
		if p.quotas != nil {
			if err := p.releaseQuota(v, e, plan.meta); err != nil {
				return plan, fail(volume.Transient, fmt.Errorf("clear %s: %w", plan.meta.describeQuota(), err))
			}
			if plan.meta.hasQuota() {
				v.hook.At(testhook.TearDownQuotaCleared, dir)
			}
		}
		if plan.Action == ActionRemove {
			if err := v.removeTree(); err != nil {
				return plan, fail(volume.Transient, err)
			}
			v.hook.At(testhook.TearDownRemoved, dir)
		}
	}
	if err := v.removeMetadata(); err != nil {
		return plan, fail(volume.Transient, fmt.Errorf("remove metadata: %w", err))
	}
	v.hook.At(testhook.TearDownDone, dir)
	logger.V(2).Info("emptyDir torn down", "action", plan.Action)
	return plan, nil
}

// releaseQuota releases the project of the volume, whose entry the plan
// found as e: through the volume directory when e is one (its project is
// taken off it if it is the directory the record names), else through a
// directory above it on the same filesystem, where only the limits are
// cleared; with none left (the pods directory gone), only the
// bookkeeping.
func (p *Plugin) releaseQuota(v *podVolume, e entry, meta *metadata) error {
	q := p.quotas
	if e.kind == entryDir {
		var rec fsquota.Project
		if meta != nil {
			rec = meta.quotaProject()
		}
		return q.Clear(e.Fd, v.dir, rec)
	}
	for _, d := range []*fsat.Dir{v.vols, v.pod, v.pods} {
		if d != nil {
			return q.Release(d.Fd(), v.dir)
		}
	}
	return q.Release(-1, v.dir)
}

// unmount unmounts the volume's own mount, named through the volumes
// directory's descriptor with UMOUNT_NOFOLLOW (a symlink swapped in for the
// volume directory is not followed; an intermediate path cannot be
// redirected). The descriptor of the mount's root must be closed by now.
//
// The name is bound first: the directory beneath the mount is pinned
// (pinMountpoint), so that no rename, exchange or removal can put another
// directory, and the mount on it, under the volume's name until the pin
// goes. Then the record is checked once more right before umount2, and
// the result right after. What is left, between that statx and umount2, is
// a process that can mount into this mount namespace through propagation
// (a container with Bidirectional propagation) stacking a mount on the
// volume's root: umount2 takes that mount instead, and the check after it
// sees the recorded mount still in place and says so (an Uncertain
// failure), so the event is never silent.
//
// On success the pin is returned, still held (nil where the directory
// cannot be pinned): the caller releases it before removing the
// directory. On failure nothing stays pinned.
func (v *podVolume) unmount(logger logr.Logger, plan Plan) (*pin, error) {
	rec := plan.meta.Mount
	refuse := func(reason string) (*pin, error) {
		plan.Action, plan.Code, plan.Reason, plan.Remedy = ActionRefuse, ReasonMountChanged, reason, ""
		plan.Mounts = []mountdetect.Mount{{MountPoint: v.dir}}
		return nil, plan.refusal()
	}
	pinned, err := v.pinMountpoint(rec)
	switch {
	case errors.Is(err, errCannotPin):
		// Unmounted by name without the binding: the window a renamer
		// can use stays open (see the package documentation).
		logger.Info("Unmounting an emptyDir volume without pinning its directory", "reason", err)
	case errors.Is(err, errPinnedOther):
		return refuse(err.Error())
	case err != nil:
		return nil, err
	}
	fail := func(err error) (*pin, error) {
		if pinned != nil {
			return nil, pinned.undoWith(err)
		}
		return nil, err
	}
	mi, err := fsat.StatMount(v.vols.Fd(), v.name, bothIDs)
	if err != nil {
		return fail(fmt.Errorf("statx %s: %w", v.dir, err))
	}
	if !mi.Root || !rec.sameMount(mi, v.ref) {
		_, err := refuse("the mount on the volume directory changed while it was examined")
		return fail(err)
	}
	// The window the package documents, for tests to act in.
	v.hook.At(testhook.TearDownBeforeUnmount, v.dir)
	target := v.vols.ProcPath(v.name)
	if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil {
		// Nothing was unmounted: EBUSY (still in use; never detached
		// lazily) or the mount vanished meanwhile.
		return fail(fmt.Errorf("unmount %s %s: %w", plan.Info.FSType, v.dir, err))
	}
	after, err := fsat.StatMount(v.vols.Fd(), v.name, bothIDs)
	if err != nil {
		return fail(fmt.Errorf("statx %s after unmount: %w", v.dir, err))
	}
	if after.Root {
		if rec.sameMount(after, v.ref) {
			return fail(fmt.Errorf("unmount %s: a mount stacked on the volume's own mount at the last moment was unmounted instead of it (%s is still mounted); nothing was removed", v.dir, rec.describe()))
		}
		return fail(fmt.Errorf("unmount %s: another mount (%s) is on the volume directory after the volume's own was unmounted; nothing was removed", v.dir, describeMount(after)))
	}
	if rec.DirIno != 0 {
		st, err := v.vols.Lstat(v.name)
		if err != nil {
			return fail(fmt.Errorf("after unmounting %s: %w", v.dir, err))
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != rec.DirDev || st.Ino != rec.DirIno {
			return fail(fmt.Errorf("unmount %s: the directory now there is not the one SetUp mounted on (device %d, inode %d): it was replaced while the unmount was checked, and the mount unmounted may not have been the volume's own; nothing was removed", v.dir, rec.DirDev, rec.DirIno))
		}
	}
	return pinned, nil
}

// removeTree removes the volume directory with mountdetect.RemoveAllAt,
// through the volumes directory's descriptor. A refusal (a mount that
// appeared since the plan) is wrapped like a planned refusal.
func (v *podVolume) removeTree() error {
	if v.vols == nil {
		return nil
	}
	var opts []mountdetect.Option
	if v.hook != nil {
		opts = append(opts, friend.RemoveAllHook(v.hook).(mountdetect.Option))
	}
	err := mountdetect.RemoveAllAt(v.vols.Fd(), v.name, v.dir, opts...)
	var crossing *mountdetect.CrossesMountError
	if errors.As(err, &crossing) {
		return &RefusedError{Plan: Plan{Path: v.dir, Action: ActionRefuse, Mounts: crossing.Mounts, Code: ReasonNestedMounts, Reason: "a mount appeared beneath the volume"}, Err: err}
	}
	return err
}
