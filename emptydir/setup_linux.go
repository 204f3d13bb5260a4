package emptydir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// SetUp creates the volume: a directory (Default), a tmpfs (Memory) or a
// hugetlbfs (HugePages) at Path, records what it made and writes the ready
// marker. A second SetUp of a ready volume whose medium is still in place
// does nothing; a ready marker whose directory or mount vanished is
// repaired by setting the volume up again.
//
// Every directory is reached by descriptors from the kubelet root (a
// symlink below the root is an error naming it), and a tmpfs or hugetlbfs
// is created detached (fsopen, fsmount), recorded in the metadata with its
// mount ID, then attached to the volume directory's descriptor
// (move_mount): no path is resolved to decide where it lands, and
// TearDown can prove the mount it finds is this one.
func (m *mounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	logger := logr.FromContextOrDiscard(ctx).WithValues("volume", m.dir)
	allocatable, err := m.plugin.host.NodeAllocatableMemory()
	if err != nil {
		return m.setUpErr(volume.Transient, fmt.Errorf("node allocatable memory: %w", err))
	}
	plan, err := planSetUp(&m.source, m.pod, allocatable)
	if err != nil {
		return m.setUpErr(volume.Final, err)
	}
	// From here on a failure may leave something on disk (directories,
	// metadata, a quota, a mount): it is Uncertain, so that the volume
	// manager keeps the volume in its actual state and tears it down when
	// the pod goes, instead of forgetting it until a restart.
	v, err := m.plugin.openVolume(m.ref, true)
	if err != nil {
		return m.setUpErr(volume.Uncertain, err)
	}
	defer v.Close()
	meta, err := v.readMeta()
	if err != nil {
		// Never overwrite a record that cannot be read: it may hold the
		// only trace of a quota project or a mount.
		return m.setUpErr(volume.Uncertain, fmt.Errorf("read metadata: %w", err))
	}
	if meta != nil && meta.Medium != plan.medium {
		// The volume was set up as another medium (a pod's spec cannot
		// change, so only a caller that picks the medium per request, a
		// CSI driver's, gets here): mounting over a Default volume would
		// hide its data and drop its quota project from the record, and
		// a Default volume over a Memory one would be set up on a
		// mount. Nothing is changed.
		return m.setUpErr(volume.Final, fmt.Errorf("%w: %s was set up as %s and is asked for as %s; nothing was changed", ErrMediumChanged, m.dir, meta.Medium, plan.medium))
	}
	if v.isReady() {
		ok, err := m.inPlace(v, plan, meta)
		if err != nil {
			return m.setUpErr(volume.Uncertain, err)
		}
		if ok {
			if plan.medium == volume.MediumMemory && meta.SizeBytes != plan.size {
				// Resized in place (Plugin.ResizeVolume): the mount, and
				// its size, stay as they are.
				logger.V(2).Info("Volume in place with a size other than the spec's; keeping it", "size", meta.SizeBytes, "specSize", plan.size)
			}
			return nil
		}
		logger.V(1).Info("Ready marker present but the volume is not in place; setting it up again", "medium", plan.medium)
	}
	if meta != nil && meta.Mount != nil && !m.mountedOnDir(v) {
		// Not in place, and nothing is mounted on the directory (what is
		// — the recorded mount under a pending record, or a foreign one
		// — setUpMount deals with), but the recorded mount may be
		// mounted elsewhere (its directory renamed, the mount moved): a
		// new mount and record would leave it mounted for good,
		// unprovable.
		if err := m.mountElsewhere(meta); err != nil {
			return m.setUpErr(volume.Uncertain, err)
		}
	}
	switch plan.medium {
	case volume.MediumDefault:
		err = m.setUpDir(logger, v, plan, args)
	default:
		err = m.setUpMount(logger, v, plan, args, meta)
	}
	if err != nil {
		return m.setUpErr(volume.Uncertain, err)
	}
	if err := v.setReady(); err != nil {
		return m.setUpErr(volume.Uncertain, fmt.Errorf("write ready marker: %w", err))
	}
	v.hook.At(testhook.SetUpReady, m.dir)
	logger.V(2).Info("emptyDir set up", "medium", plan.medium, "size", plan.size, "hugePageSize", plan.pageSize)
	return nil
}

// mountedOnDir reports whether the volume directory is a mount root (true
// too when that cannot be told: the checks after it decide).
func (m *mounter) mountedOnDir(v *podVolume) bool {
	if v.vols == nil {
		return false
	}
	mi, err := fsat.StatMount(v.vols.Fd(), v.name, bothIDs)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return err != nil || mi.Root
}

// mountElsewhere is an error matching ErrMountElsewhere when the mount
// that meta records is mounted somewhere (the caller knows it is not on the
// volume directory), or the error of looking; nil when it is nowhere.
func (m *mounter) mountElsewhere(meta *metadata) error {
	var tab *mountdetect.MountTable
	elsewhere, err := recordedMountElsewhere(meta, m.ref, &tab)
	if err != nil {
		return err
	}
	if len(elsewhere) > 0 {
		return fmt.Errorf("%w: %s: %s: it is at %s", ErrMountElsewhere, m.dir, movedReason(elsewhere), elsewhere[0])
	}
	return nil
}

// inPlace reports whether the volume SetUp would create is there already:
// a plain directory for Default, the recorded mount for the others.
func (m *mounter) inPlace(v *podVolume, plan setupPlan, meta *metadata) (bool, error) {
	e, err := v.openEntry()
	if err != nil || e.kind != entryDir {
		return false, err // nothing open
	}
	defer e.Close()
	if plan.medium == volume.MediumDefault {
		if e.Root {
			return false, nil
		}
		return m.quotaInPlace(e, meta)
	}
	if !e.Root || meta == nil || meta.Medium != plan.medium || (plan.medium == volume.MediumHugePages && meta.HugePageSize != plan.pageSize) {
		return false, nil
	}
	if meta.Mount != nil && meta.Mount.Pending {
		return false, nil // not until setUpMount has recorded its IDs
	}
	return recordedMountOn(e, m.dir, meta.Mount, m.ref)
}

// quotaInPlace reports whether the project meta records for a Default
// volume is on its directory (open as e), so that SetUp may leave it as
// it is. A TearDown that released the project and then failed (the tree
// could not be removed) leaves the ready marker behind; SetUp then assigns
// the project again instead of serving the volume without it. A record
// without a project (no quota manager then, or a filesystem without
// project quotas) asks nothing.
func (m *mounter) quotaInPlace(e entry, meta *metadata) (bool, error) {
	if m.plugin.quotas == nil || meta == nil || !meta.hasQuota() {
		return true, nil
	}
	if meta.QuotaPending {
		return false, nil
	}
	u, err := m.plugin.quotas.Usage(e.Fd, m.dir)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		// The filesystem has no project quotas any more (remounted
		// without prjquota): assigning again cannot help.
		return true, nil
	case errors.Is(err, fsquota.ErrNoProject):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("quota of %s: %w", m.dir, err)
	}
	return u.ProjectID == meta.QuotaProjectID, nil
}

// openDir creates the volume directory if needed and opens it; a symlink,
// a file or a mount on it is an error.
func (m *mounter) openDir(v *podVolume, mode uint32, what string) (entry, error) {
	err := fsat.Retry(func() error { return unix.Mkdirat(v.vols.Fd(), v.name, mode) })
	if err != nil && err != unix.EEXIST {
		return noEntry, &os.PathError{Op: "mkdirat", Path: m.dir, Err: err}
	}
	e, err := v.openEntry()
	if err != nil {
		return e, err
	}
	switch e.kind {
	case entryDir:
		return e, nil
	case entryMissing:
		return e, &os.PathError{Op: "openat", Path: m.dir, Err: unix.ENOENT}
	case entrySymlink:
		return e, fmt.Errorf("%s is not a directory (a symlink); not setting up %s there", m.dir, what)
	}
	return e, fmt.Errorf("%s is not a directory; not setting up %s there", m.dir, what)
}

func (m *mounter) setUpDir(logger logr.Logger, v *podVolume, plan setupPlan, args volume.MounterArgs) error {
	// Created owner-only: the plan's mode is set by setMode below, so no
	// instant shows the directory more open than the spec asks.
	e, err := m.openDir(v, 0o700, "a Default-medium volume")
	if err != nil {
		return err
	}
	defer e.Close()
	if e.Root {
		return fmt.Errorf("something is mounted on %s, which a Default-medium volume never is; not using it", m.dir)
	}
	if err := m.setMode(e.Fd, plan, args); err != nil {
		return err
	}
	v.hook.At(testhook.SetUpDirCreated, m.dir)
	meta := &metadata{Medium: volume.MediumDefault, SizeLimit: m.source.SizeLimit, Mode: m.source.Mode, StickyBit: m.source.StickyBit}
	if m.plugin.quotas != nil {
		// Recorded before Assign: from the moment the bookkeeping files
		// may name the directory until its ID is recorded, the record
		// says a project may exist, and which directory it is on.
		var st unix.Stat_t
		if err := unix.Fstat(e.Fd, &st); err != nil {
			return &os.PathError{Op: "fstat", Path: m.dir, Err: err}
		}
		meta.QuotaDirDev, meta.QuotaDirIno = uint64(st.Dev), st.Ino
		pending := *meta
		pending.QuotaPending = true
		if err := v.writeMeta(&pending); err != nil {
			return fmt.Errorf("record metadata: %w", err)
		}
		v.hook.At(testhook.SetUpQuotaIntent, m.dir)
		project, err := m.plugin.quotas.Assign(e.Fd, m.dir, m.source.SizeLimit)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			// No project quotas on this filesystem: usage is measured by
			// walking, and no project ID is recorded.
			logger.V(2).Info("No project quota for the volume; usage will be measured by walking", "reason", err)
			meta.QuotaDirDev, meta.QuotaDirIno = 0, 0
		case err != nil:
			// The pending record stays: TearDown clears whatever Assign
			// left.
			return fmt.Errorf("assign quota: %w", err)
		default:
			meta.QuotaProjectID, meta.QuotaDirDev, meta.QuotaDirIno, meta.QuotaDirGen = project.ID, project.Dev, project.Ino, project.Gen
		}
		v.hook.At(testhook.SetUpQuotaAssigned, m.dir)
	}
	if err := v.writeMeta(meta); err != nil {
		return fmt.Errorf("record metadata: %w", err)
	}
	v.hook.At(testhook.SetUpMetadataWritten, m.dir)
	return nil
}

// setMode sets the volume directory's mode whatever the umask (the plan's:
// the spec's Mode or 0777, with the sticky bit on request) and its group
// for FSGroup (with setgid, so new files inherit the group), on the open
// directory: a Default volume's directory, a Memory or HugePages volume's
// mount root.
func (m *mounter) setMode(pathFd int, plan setupPlan, args volume.MounterArgs) error {
	// The volume's own mount root is held O_PATH (see openEntry); fchmod
	// needs a real descriptor of the same directory, opened through the
	// magic link of the one held (never by name).
	fd, err := fsat.Reopen(pathFd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return &os.PathError{Op: "open", Path: m.dir, Err: err}
	}
	defer unix.Close(fd)
	mode := plan.mode
	if args.FSGroup != nil {
		if err := unix.Fchown(fd, -1, int(*args.FSGroup)); err != nil {
			return &os.PathError{Op: "fchown", Path: m.dir, Err: err}
		}
		mode |= unix.S_ISGID
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return &os.PathError{Op: "fchmod", Path: m.dir, Err: err}
	}
	return nil
}

// newFS is the filesystem setUpMount is to mount: its type, source and
// options, and the record that will describe it.
type newFS struct {
	fstype string
	// source is a new random name: the record's proof that a mount found
	// on the directory later is this one (see provenBy).
	source string
	opts   []string // "key=value" or a flag
	meta   *metadata
}

// newFSFor is the filesystem plan asks for.
func (m *mounter) newFSFor(plan setupPlan) newFS {
	f := newFS{fstype: "tmpfs", source: newSource(m.ref)}
	f.meta = &metadata{Medium: plan.medium, SizeLimit: m.source.SizeLimit, Mode: m.source.Mode, StickyBit: m.source.StickyBit}
	if plan.medium == volume.MediumHugePages {
		f.fstype = "hugetlbfs"
		f.opts = append(f.opts, "pagesize="+strconv.FormatInt(plan.pageSize, 10))
		f.meta.HugePageSize = plan.pageSize
		return f
	}
	if plan.size > 0 {
		f.opts = append(f.opts, "size="+strconv.FormatInt(plan.size, 10))
		f.meta.SizeBytes = plan.size
	}
	if kernelSupportsNoswap() {
		f.opts = append(f.opts, "noswap")
	}
	return f
}

// setUpMount mounts the plan's filesystem on the volume directory, unless
// a mount there is proven the volume's own (adopt); any other mount there
// is an error, never adopted. It owns the volume directory's descriptor
// for its whole run; each way of mounting is a function of its own that
// uses the descriptor and never closes it: the embedder's mounter
// (mountWithSystemMounter) when the host has one, else a detached mount
// (mountDetached).
func (m *mounter) setUpMount(logger logr.Logger, v *podVolume, plan setupPlan, args volume.MounterArgs, old *metadata) error {
	f := m.newFSFor(plan)
	e, err := m.openDir(v, 0o750, f.fstype)
	if err != nil {
		return err
	}
	defer e.Close()
	if e.Root {
		adopted, whyNot, err := m.adopt(logger, v, e, plan, args, old)
		if err != nil || adopted {
			return err
		}
		if whyNot != "" {
			whyNot = "; not adopted: " + whyNot
		}
		return fmt.Errorf("%s is already a mount point (%s) that SetUp did not record; not mounting %s over it%s", m.dir, describeMount(e.MountStat), f.fstype, whyNot)
	}
	v.hook.At(testhook.SetUpDirCreated, m.dir)
	if old != nil && old.Mount != nil {
		// The directory as opened is not a mount root; SetUp's check
		// before may have seen a mount there that is gone now (one
		// toggled by whoever can mount in the pod directory). Any
		// mount with the recorded source is elsewhere: a new mount and
		// record would leave it mounted for good.
		if err := m.mountElsewhere(old); err != nil {
			return err
		}
	}
	var under unix.Stat_t
	if err := unix.Fstat(e.Fd, &under); err != nil {
		return &os.PathError{Op: "fstat", Path: m.dir, Err: err}
	}
	if sm := m.plugin.host.Mounter(); sm != nil {
		return m.mountWithSystemMounter(v, sm, e.Fd, &under, f, plan, args)
	}
	return m.mountDetached(v, e.Fd, &under, f, plan, args)
}

// adopt reports whether the mount already on the volume directory (e, a
// mount root) is proven the volume's own, and if so takes it as the
// volume. Each proof is a function of its own, tried in turn: SetUp's own
// record (adoptRecorded), then, with WithAdoption, the adoption rule for
// the mount the kubelet before nodevol made (adoptPrevious). A mount no
// proof accepts is not the volume's; whyNot says why the adoption rule
// refused it ("" when adoption is off).
func (m *mounter) adopt(logger logr.Logger, v *podVolume, e entry, plan setupPlan, args volume.MounterArgs, old *metadata) (adopted bool, whyNot string, err error) {
	if adopted, err := m.adoptRecorded(logger, v, e, plan, args, old); err != nil || adopted {
		return adopted, "", err
	}
	return m.adoptPrevious(logger, v, e, plan, old)
}

// adoptRecorded adopts the mount that old, the volume's record, proves
// its own (a SetUp that stopped before writing the ready marker), as
// TearDown would prove it; a pending record (a SetUp through the
// embedder's mounter that stopped between the mount and recording its
// IDs) is completed with the mount's IDs.
func (m *mounter) adoptRecorded(logger logr.Logger, v *podVolume, e entry, plan setupPlan, args volume.MounterArgs, old *metadata) (bool, error) {
	if old == nil || old.Medium != plan.medium {
		return false, nil
	}
	ours, err := recordedMountOn(e, m.dir, old.Mount, m.ref)
	if err != nil || !ours {
		return false, err
	}
	logger.V(2).Info("Already mounted", "fsType", old.Mount.FSType)
	if old.Mount.Pending {
		pinned := *old
		rec := old.Mount.pin(e.MountStat)
		pinned.Mount = &rec
		if err := v.writeMeta(&pinned); err != nil {
			return false, fmt.Errorf("record metadata: %w", err)
		}
	}
	return true, m.setMode(e.Fd, plan, args)
}

// mountWithSystemMounter mounts f on the volume directory (open as dirFd,
// the directory under, whose fstat is under) with the embedder's mounter.
// The mounter gets the directory as the magic link of the descriptor, so
// the mount's IDs are known only after it. Its source is known before: the
// record says the mount is pending before it is made, so that a crash in
// between leaves a mount the record proves by that source (see
// MountRecord.Pending), never one nothing records.
func (m *mounter) mountWithSystemMounter(v *podVolume, sm volume.SystemMounter, dirFd int, under *unix.Stat_t, f newFS, plan setupPlan, args volume.MounterArgs) error {
	pending := &mountRecord{FSType: f.fstype, Source: f.source, DirDev: under.Dev, DirIno: under.Ino, Pending: true}
	f.meta.Mount = pending
	if err := v.writeMeta(f.meta); err != nil {
		return fmt.Errorf("record metadata: %w", err)
	}
	v.hook.At(testhook.SetUpMetadataWritten, m.dir)
	if err := sm.Mount(f.source, "/proc/self/fd/"+strconv.Itoa(dirFd), f.fstype, f.opts); err != nil {
		return fmt.Errorf("mount %s on %s (options %v): %w", f.fstype, m.dir, f.opts, err)
	}
	v.hook.At(testhook.SetUpMounted, m.dir)
	top, err := v.openEntry()
	if err != nil {
		return err
	}
	defer top.Close()
	f.meta.Mount = nil
	if top.kind == entryDir && top.Root {
		ours, err := recordedMountOn(top, m.dir, pending, m.ref)
		if err != nil {
			return err
		}
		if !ours {
			return fmt.Errorf("after mounting %s (source %s) on %s, the directory shows something else (%s)", f.fstype, f.source, m.dir, describeMount(top.MountStat))
		}
		rec := pending.pin(top.MountStat)
		f.meta.Mount = &rec
	}
	if err := v.writeMeta(f.meta); err != nil {
		return fmt.Errorf("record metadata: %w", err)
	}
	v.hook.At(testhook.SetUpMountRecorded, m.dir)
	if top.kind == entryDir {
		return m.setMode(top.Fd, plan, args)
	}
	return nil
}

// mountDetached mounts f on the volume directory (open as dirFd; its
// fstat is under) without resolving a path: the filesystem is created
// detached (fsopen, fsmount), recorded with its IDs, then attached to the
// directory's descriptor (move_mount).
func (m *mounter) mountDetached(v *podVolume, dirFd int, under *unix.Stat_t, f newFS, plan setupPlan, args volume.MounterArgs) error {
	mnt, rec, err := newMount(f.source, f.fstype, f.opts)
	if err != nil {
		return fmt.Errorf("mount %s on %s (options %v): %w", f.fstype, m.dir, f.opts, err)
	}
	defer unix.Close(mnt)
	// The record goes to disk before the mount is attached: a crash from
	// here on leaves a record of a mount that either never appeared (the
	// detached mount dies with this process) or is exactly this one.
	rec.DirDev, rec.DirIno = under.Dev, under.Ino
	f.meta.Mount = &rec
	if err := v.writeMeta(f.meta); err != nil {
		return fmt.Errorf("record metadata: %w", err)
	}
	v.hook.At(testhook.SetUpMetadataWritten, m.dir)
	err = fsat.Retry(func() error {
		return unix.MoveMount(mnt, "", dirFd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	})
	if err != nil {
		return fmt.Errorf("attach %s to %s: %w", f.fstype, m.dir, &os.PathError{Op: "move_mount", Path: m.dir, Err: err})
	}
	v.hook.At(testhook.SetUpMounted, m.dir)
	top, err := v.openEntry()
	if err != nil {
		return err
	}
	defer top.Close()
	if top.kind != entryDir || !top.Root || !rec.sameMount(top.MountStat, m.ref) {
		return fmt.Errorf("after attaching %s (%s) to %s, the directory shows something else (%s)", f.fstype, rec.describe(), m.dir, describeMount(top.MountStat))
	}
	return m.setMode(top.Fd, plan, args)
}

// newMount creates a detached mount of fstype with the kubelet's source
// name and options ("key=value" or a flag), and returns its descriptor and
// identity.
func newMount(source, fstype string, opts []string) (int, mountRecord, error) {
	rec := mountRecord{FSType: fstype, Source: source}
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, rec, &os.SyscallError{Syscall: "fsopen " + fstype, Err: err}
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", source); err != nil {
		return -1, rec, &os.SyscallError{Syscall: "fsconfig source", Err: err}
	}
	for _, o := range opts {
		k, val, kv := strings.Cut(o, "=")
		if kv {
			err = unix.FsconfigSetString(fsfd, k, val)
		} else {
			err = unix.FsconfigSetFlag(fsfd, k)
		}
		if err != nil {
			return -1, rec, &os.SyscallError{Syscall: "fsconfig " + o, Err: err}
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, rec, &os.SyscallError{Syscall: "fsconfig create", Err: err}
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return -1, rec, &os.SyscallError{Syscall: "fsmount", Err: err}
	}
	mi, err := fsat.StatMount(mnt, "", bothIDs)
	if err != nil {
		unix.Close(mnt)
		return -1, rec, err
	}
	rec.UniqueID, rec.ID, rec.Dev = mi.UniqueID, mi.ID, mi.Dev
	return mnt, rec, nil
}
