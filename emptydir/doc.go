// Package emptydir is the kubernetes.io/empty-dir volume plugin, with one
// promise the kubelet's does not keep: tearing a volume down never deletes
// data that lives on another mount, never unmounts a mount it did not
// make, and never follows a path out of the volume.
//
// It uses the kubelet's on-disk layout and "ready" marker, so it can take
// over an existing node, and records what SetUp created (medium, tmpfs size,
// huge page size, quota project, and the identity of the mount it made) in
// a small nodevol.json beside the marker.
//
// # The attacker
//
// Whoever can write into a pod directory — a container with bidirectional
// mount propagation, a process in another mount namespace with the pod
// directory bind-mounted — controls the names, symlinks, mounts and file
// contents below the kubelet root, and can change them between any two
// system calls. So below the root nothing is resolved by name twice: the
// root is opened once (it may itself be a symlink: it is trusted), then
// pods/<uid>, volumes/kubernetes.io~empty-dir and
// plugins/kubernetes.io~empty-dir/<volume> one component at a time
// relative to the previous descriptor, without following symlinks; the
// directories below the pod directory must be on the pod directory's
// mount. A symlink where a directory belongs is an error naming it, and
// nothing is touched. Every check and action after that uses the
// descriptors: the medium is detected on the open volume directory, the
// unmount goes through /proc/self/fd/N/<volume> with UMOUNT_NOFOLLOW while
// the directory beneath the mount is pinned (see TearDown), the removal
// through the volumes directory's descriptor.
//
// A filesystem mounted on the volume directory, on a directory between
// the pods directory and the volume, or inside the volume is never asked
// anything before it is proven the volume's own: entries are looked at
// with statx (AT_STATX_DONT_SYNC, type and mount IDs only) before they
// are opened, a directory that is a mount where none belongs is refused
// unopened, the volume directory is opened O_PATH when it is a mount
// root, and a mount's type comes from the mount table. So a FUSE daemon
// that stopped answering cannot hang a teardown, a dry run, a scan,
// reconstruction or Usage. (The kubelet root and the pods directory are
// trusted and may be mounts of their own; a stalled filesystem there
// stops the node anyway.)
//
// nodevol.json is read with O_NOFOLLOW|O_NONBLOCK relative to the
// metadata directory's descriptor, must be a regular file and at most
// 64 KiB: a FIFO, a device, a symlink (to /dev/zero, say) or a huge file
// in its place is an error naming it, never a hang or an allocation
// proportional to the input. It is written atomically (temporary file,
// fsync, rename, fsync of the directory).
//
// # SetUp
//
//   - Default: a directory with the spec's mode ([volume.EmptyDirSource]
//     Mode, 0 to 01777; nil: 0777; StickyBit adds the sticky bit, so nil
//     with StickyBit is 01777), whatever the umask; refused when something
//     is mounted on it. With a quota
//     manager, nodevol.json says a project is being assigned before
//     Assign is called, and the project ID once it returns: no instant
//     leaves a project in the bookkeeping files that no record names;
//   - Memory: a tmpfs whose size= is the smallest positive of the node's
//     allocatable memory, the pod's memory limit and the volume's
//     sizeLimit, with noswap when tmpfs takes it (Linux 6.4, see [TmpfsNoswap]);
//     its root has the spec's mode, and 01777 without one (the kubelet's
//     tmpfs root keeps tmpfs's default 01777, and a subPath created in it
//     copies that mode: Kubernetes's NodeConformance specs check it);
//   - HugePages / HugePages-<size>: a hugetlbfs with pagesize= from the
//     pod's hugepage requests (plain HugePages needs exactly one size).
//
// Memory and HugePages mounts are made detached (fsopen, fsconfig,
// fsmount) with a new source name ("nv-", 8 random hex digits, "-" and 8
// hex digits of a digest of those, the pod UID and the volume name, where
// the kubelet writes "tmpfs"; 20 characters, which busybox's df prints on
// one line; records of earlier versions name the long form
// "nodevol-emptydir-<16 hex>-<16 hex>", still proven: a mount is proven only
// under the name of the volume it was made for, never after another
// volume's mount was renamed or bind-mounted into its place), their identity — that source,
// the unique mount ID where the kernel has one (Linux 6.8), the mount ID,
// device and type — is recorded in nodevol.json, and only then is the
// mount attached onto the open volume directory (move_mount): there is no
// moment at which the volume's mount is visible without a record. With a
// custom [volume.SystemMounter] the mount is made by path (/proc/self/fd/N,
// the open directory, so the mounter must mount in this process: the
// name means nothing to a mount(8) it runs, as k8s.io/mount-utils' real
// mounter does) with the same kind of source; its source, type and the
// directory under it are recorded as pending before the mount is made,
// its IDs right after. A mount found under a pending record (a crash in
// between) is proven by its source alone and its IDs recorded then.
//
// The record is in the pod directory, so whoever can write there can
// forge it. What proves a mount is therefore the mount itself: it must be
// a tmpfs or hugetlbfs (SetUp makes nothing else; a FUSE filesystem may
// name any source), its source in the mount table must be the recorded
// random name, and its mount ID the recorded one. A forged record can
// thus name only a tmpfs or hugetlbfs carrying a nodevol source: one the
// forger mounted with that name, which holds nobody's data but theirs, or
// a bind of another nodevol volume (a bind keeps its source) — which
// takes mounting in the host's namespace and predicting the bind's
// unique mount ID, and gives no more than that access gives anyway
// (SetUp would set the mode of that volume's root; nothing is removed
// from it). A forged pending record spares the forger predicting the
// mount ID, not mounting in the host's namespace. Never a share, another
// plugin's volume or the kubelet's own mounts, whose sources are not
// nodevol's. A mount found on the directory
// that this does not prove is never adopted by SetUp, unmounted, measured
// or asked anything.
//
// The mode of a Memory or HugePages volume is set on the mount's root,
// the directory the pod sees (fchmod through the proven mount's
// descriptor); the directory beneath the mount stays 0750. Upstream
// chmods the directory before it mounts tmpfs over it, so there the mode
// never reaches the pod, which sees tmpfs's own 01777. A mode outside 0
// to 01777 (a setuid or setgid bit, say) is a Final error before anything
// is touched; FSGroup adds setgid, as before. The spec's Mode is recorded
// in nodevol.json, and reconstruction ([Plugin.ConstructSpec]) gives it
// back.
//
// SetUp is idempotent, and repairs a ready volume whose directory or mount
// vanished, or a Default volume whose recorded quota project is no longer
// on its directory (a TearDown that released it, then failed): that one
// goes through SetUp again, its mode and group included. A volume recorded as another medium than the spec asks for is
// an error (ErrMediumChanged) and nothing changes: a pod's spec cannot
// change, but a CSI driver's caller picks the medium per request, and
// mounting over a Default volume would hide its data and drop its quota
// project from the record. A ready volume in place is left as it is — its mode, and the
// size of a tmpfs resized since ([Plugin.ResizeVolume]); only a SetUp that
// has to mount again computes the size from the spec it is given.
//
// # Adopting the mounts of the kubelet before nodevol
//
// With [WithAdoption] (nodevol-kubelet passes it), SetUp adopts the tmpfs
// or hugetlbfs that a stock kubelet mounted for the volume before the
// node was switched to nodevol in place, and only such a mount: a tmpfs
// from "tmpfs" (a hugetlbfs from "nodev" of the volume's page size), the
// sole mount on the volume directory, the whole filesystem, nothing
// beneath it, its superblock mounted nowhere else but under the pod's
// volume-subpaths/<volume>/, no record of nodevol's for the volume, made
// while no nodevol process ran on this kubelet root since the node
// booted, and on the volume directory already when this process started.
// The time is the session log's, <root>/nodevol-sessions.json: unique
// mount IDs (Linux 6.8) only grow within a boot, and the log holds the
// span of IDs during which each nodevol process of the boot ran (rewritten
// in place under an flock, so a full filesystem or a second process on the
// root does not cut a session short; a process still running is taken as
// running until the next one starts; a process that cannot write its
// session at all marks the log unrecorded, and the next one takes
// everything before it as nodevol's time). Limit: a process that cannot
// even create the log (a full XFS, no free inode) leaves no trace if it
// is killed before it can. A mount
// made while one ran is never adopted, by any later process either. The
// place is the mount table's, read when the process starts: a rename of a
// directory above a mount, or a move of the mount, keeps its unique ID,
// so another volume's tmpfs renamed into a volume's place while nodevol
// runs would otherwise pass for the volume's. The adopted mount is recorded
// in nodevol.json ("adopted", with its unique ID and the boot's ID) and proven
// by that unique ID from then on, as nodevol's own mounts are by theirs;
// TearDown plans it with ReasonAdoptedMount, and refuses it, like any
// volume, with a mount beneath it. Each adoption is logged and reported
// to Adoption.Adopted (nodevol-kubelet counts them in
// nodevol_emptydir_adopted_volumes_total). Limits: a tmpfs of that shape
// that someone else mounted on a wanted volume's directory before
// nodevol first ran (or while a stock kubelet ran again) is adopted as
// the volume, as the stock kubelet would serve it; it is unmounted, never
// entered past another mount, at teardown. Without unique mount IDs
// (Linux before 6.8) nothing is adopted. Volumes at a location that
// requires a record, or in any mount namespace (a CSI driver's), are never
// adopted. docs/kubelet.md has the threat analysis.
//
// # Resize
//
// [Plugin.ResizeVolume] resizes a Memory volume's tmpfs in place (the
// kubelet's ResizeEphemeralVolume), with the same care as TearDown: the
// volume directory is opened by descriptors from the kubelet root, the
// single mount on it must be proven the one SetUp recorded (record,
// source, mount IDs), and that mount is reconfigured through the open
// descriptor — fspick (FSPICK_EMPTY_PATH, FSPICK_NO_AUTOMOUNT,
// FSPICK_SYMLINK_NOFOLLOW), fsconfig size=, FSCONFIG_CMD_RECONFIGURE —
// never by path. A mount stacked on the volume or a symlink swapped in
// after the proof is never what is resized; a mount that is not proven
// the volume's own is refused ([ErrForeignMount]) and asked nothing.
//
// tmpfs refuses a size below its current use (fsconfig fails with EINVAL,
// "Too small a size for current use"; a size equal to the use is
// accepted, sizes round up to whole pages): ResizeVolume returns a
// [*ShrinkBelowUseError] saying what the volume uses, and nothing changes.
// A Default or HugePages volume, or a size <= 0 (adding or removing a size
// limit), is a Final error ([ErrResizeUnsupported]); a volume not set up
// or not mounted a Transient one ([ErrResizeDeferred]: the volume manager
// retries after SetUp, as the kubelet defers the resize). After a resize
// nodevol.json records the new size as SizeBytes and SizeLimit (written
// atomically), so that reconstruction gives a spec of the size the volume
// has. The record follows the resize (the kernel's reconfigure is the only
// step that changes the volume): a crash in between leaves the old size in
// the record, which proves nothing (a mount is proven by its source and
// IDs, never its size), and the next resize sets it again.
//
// # TearDown
//
// TearDown (the Unmounter's, or [Plugin.TearDownVolume], which returns
// the plan it followed) does what follows; [Plugin.PlanTearDown] says the
// same without acting, and CheckTearDown ([volume.TearDownChecker]) on the
// Unmounter returns the refusal alone, so that a volume manager can check
// everything (subpaths included) before it changes anything. A [Planner]
// makes PlanTearDown's plans of many volumes, pod after pod, with each
// pod's directories opened once; its [Planner.PlanListed] makes those of
// a plugin directory [volume.Layout.ScanVolumes] hands on through the pod
// and plugin directories the listing holds open, borrowed for the call.
//   - nothing there: success (leftover metadata is removed) — unless the
//     recorded mount is still mounted elsewhere (its directory renamed, or
//     the mount moved, by whoever can write in the pod directory; found
//     in the mount table by its unique source): refused, naming where it
//     is, so that the record of a mount nothing else would ever unmount
//     is never dropped (SetUp refuses to mount again too,
//     [ErrMountElsewhere]);
//   - the volume's own tmpfs or hugetlbfs on the directory, proven by its
//     record, is unmounted only when it is the only mount of its source
//     in the mount table and mounts the whole filesystem: a bind of it
//     elsewhere (or the tmpfs moved away with a bind of it left in its
//     place) would stay mounted with its record gone, so that is refused,
//     naming the other mounts; SetUp never takes such a volume as in place;
//   - a located volume with [Location.RecordRequired] and no record: its
//     directory goes only when empty, otherwise [ErrNoRecord] and nothing
//     changes;
//   - any mount beneath the volume directory: refused, nothing changes —
//     ready marker and metadata stay, so a retry or a restart sees the same
//     state — and the error (a [*RefusedError] wrapping a
//     [*mountdetect.CrossesMountError], errors.Is [mountdetect.ErrCrossesMount])
//     lists every mount;
//   - something mounted on the volume directory itself is unmounted only
//     when it is a single mount that matches SetUp's record (unique mount
//     ID; or mount ID, device, type and source on kernels without one).
//     Refused, changing nothing and naming the mounts: a mount on a Default
//     volume; two or more mounts stacked; a mount whose identity does not
//     match; metadata that cannot be read; no record at all;
//   - the volume's own mount: its directory — beneath the mount, on the
//     kubelet root's filesystem, opened through a detached copy of the
//     volumes directory's mount made without the mounts on it (open_tree
//     OPEN_TREE_CLONE) — is pinned: made immutable (FS_IMMUTABLE_FL),
//     which no process can rename, exchange, replace or remove, and then,
//     once the renames the kernel let through before the flag are over,
//     found still under the volume's name. From then on the name can only
//     reach that directory and the mount on it; the mount is checked once
//     more with statx right before umount2 (never lazily: a busy mount is
//     an error) and after it, the flag is cleared, then the directory is
//     removed. A directory that changed while it was pinned is a refusal
//     (nothing stays pinned);
//   - a metadata directory holding anything but the ready marker,
//     nodevol.json and temporary files of an interrupted write (all
//     regular files), or a recorded quota project without a quota manager:
//     an error before anything changes, since the teardown could not
//     finish;
//   - Default: the quota (if one was assigned, or SetUp stopped while
//     assigning one) is cleared by path — an error is returned, not
//     logged — then the tree is removed with
//     [mountdetect.RemoveAllAt], which stops at mounts that appear meanwhile;
//     the metadata goes last.
//
// A volume set up by a stock kubelet (or an older nodevol, or through a
// custom mounter that left no identity) has no record of its mount: a
// Default one tears down normally, but a tmpfs or hugetlbfs on its
// directory is refused, because nothing proves it is the volume's own and
// not a share mounted there. The refusal says how to proceed: if the mount
// is the volume's own, unmount it (umount DIR), then tear down again.
//
// Errors are [*volume.OperationError] values classified Transient (retry
// after backoff: a refused or failed TearDown), Uncertain (a SetUp that
// failed once it had touched the disk, or an unmount that failed or went
// wrong: the volume may be partly there, and a volume manager must tear it
// down when its pod goes) or Final (a configuration that retrying cannot
// fix).
//
// # Volumes in another plugin's directory
//
// The kubelet's secret, configMap, downwardAPI and projected plugins put a
// Memory emptyDir (gitRepo a Default one) in their own volume directory
// through their wrapper mounter. [Plugin.NewMounterAt] and
// [Plugin.NewUnmounterAt] serve them: a [Location] names the plugin, the
// directory in its volumes directory and the metadata directory under
// plugins/kubernetes.io~empty-dir (the kubelet's "wrapped_<volume>").
// Everything above holds for them unchanged — reached by descriptors, on
// the pod directory's mount, symlinks never followed, a mount proven
// before it is unmounted — with two bindings of their own:
//   - the mount source's digest is over another domain and the whole
//     location (pod UID, plugin, directory, metadata name), so a mount
//     made for one location, or for an ordinary volume, is never proven at
//     another (an ordinary volume's digest is what it always was: records
//     written before still prove their mounts);
//   - nodevol.json records the location (an ordinary volume's records
//     none), and a record of another volume — another location, an
//     ordinary volume's where a located one is expected, or the reverse —
//     is an error matching [ErrOtherVolumesRecord] before anything
//     changes: it is neither used, overwritten nor removed.
//
// The metadata name must not be a valid volume name (a DNS label), so no
// ordinary volume of a pod the API server admitted shares a located
// volume's metadata directory; a directory named so by whoever writes in
// the pod directory meets the record check above. Usage, resize and
// reconstruction go by an ordinary volume's name and never reach a
// located volume (given its metadata name, they fail with
// ErrOtherVolumesRecord).
//
// # Crash safety
//
// A kubelet killed at any step of SetUp or TearDown leaves a state that
// the next volume manager finishes: reconstruction finds the volume by its
// directory, and the next SetUp (pod still wanted) or TearDown (pod gone)
// completes it from the record.
//   - The volume directory exists before anything is recorded, and
//     nodevol.json and the ready marker are written atomically and
//     durably (temporary file, fsync, rename, fsync of the directory; the
//     ready marker is an fsynced empty file). The ready marker comes
//     last.
//   - The record comes before what it records: a quota project is
//     recorded as pending before Assign (and fsquota's bookkeeping files
//     name it before the directory carries it), a tmpfs or hugetlbfs
//     before it is attached (with an embedder's mounter, as pending,
//     before it is mounted). No instant leaves a project or a mount of
//     SetUp's that no record names.
//   - TearDown undoes before it forgets: the mount is unmounted, or the
//     quota released (releasing twice is harmless), before the directory
//     is removed, and the metadata goes last. The release asks fsquota for
//     what its files record for the volume's path, whatever nodevol.json
//     says (it sits where others write), through the volume directory, or
//     a directory above it on the same filesystem when it is gone. An
//     interrupted RemoveAll resumes, and still refuses a mount that
//     appeared meanwhile.
//     A teardown stopped while the volume directory was pinned leaves it
//     immutable; the next one clears the flag (an immutable directory
//     under the volume's name can only have been made so there) before it
//     removes the directory.
//
// TestCrash kills a child process with SIGKILL at each step (and inside
// fsquota's Assign and Clear, and after the first, a middle and the last
// entry of a RemoveAll), starts a new reconciler.Manager on the same root
// and checks the volume set up or gone, no project left in the
// bookkeeping or the kernel, no mount left, another pod's NAS intact.
// hack/quota-vm-test.sh runs the quota cases on a kernel with quotas.
// A power loss is covered as far as those fsyncs go: the directories
// SetUp creates are not synced on their own (ext4 and XFS commit them in
// their journal with the fsyncs that follow; other filesystems may not).
//
// # Limits
//
//   - umount2 names what it unmounts by path; there is no unmount by mount
//     ID, through the mount root's descriptor (/proc/self/fd/N) it always
//     fails with EBUSY (the descriptor holds the mount), and moving the
//     mount by that descriptor to a point only nodevol can name is refused
//     under a shared parent (EINVAL, whatever the mount's own
//     propagation), as a kubelet root usually is; nor can a mount be moved
//     into a detached tree, or unmounted there. The pin binds the name
//     instead, and leaves three openings. (1) Where the directory cannot
//     be pinned — a kubelet root on a filesystem without the immutable
//     attribute (ramfs, NFS, most FUSE filesystems; tmpfs has it since
//     Linux 6.0, ext4, XFS and Btrfs have it), a process without
//     CAP_LINUX_IMMUTABLE, a volumes directory on an unbindable mount —
//     the mount is unmounted by name unpinned, which is logged ("Unmounting
//     an emptyDir volume without pinning its directory"): a process that
//     can rename directories in the pod directory from a mount namespace
//     where they are not mount points can, between the last statx and
//     umount2, put another mount point under the volume's name, and
//     umount2 takes that mount (a tmpfs mounted nowhere else loses its
//     contents). The check after umount2 finds a directory other than the
//     one SetUp mounted on (its device and inode are recorded), removes
//     nothing and fails with an Uncertain error naming the event. (2) A
//     renamer with CAP_LINUX_IMMUTABLE (root on the host, a privileged
//     container) can clear the flag and do the same. (3) Whoever can
//     mount into this mount namespace through propagation (a container
//     with Bidirectional propagation, which must be privileged) can stack
//     a mount on the volume's root in that window; umount2 takes it — a
//     copy of a mount that process made, which it could unmount itself —
//     and the check after it finds the volume's own mount still in place
//     (an Uncertain error).
//   - Quotas (fsquota) are assigned, read and released through the
//     volume directory's descriptor, never its path: the bookkeeping
//     files record the path as text only. The record names the directory
//     the project was assigned to (inode number and generation); TearDown
//     takes the project off the volume directory only when it is that
//     directory, and releases only what the bookkeeping files record for
//     the volume's path, so a directory swapped into the volume's place,
//     or a project ID planted in the record, never loses its project, and
//     a record rewritten to name no project still has the path's project
//     released. Usage is read from the quota only while the directory
//     carries the recorded project. A container that owns the volume
//     directory can still retag what it creates with another project ID
//     (the kernel allows the owner that, outside a user namespace), as
//     with the kubelet.
//   - Mounts in other mount namespaces are invisible here; see
//     mountdetect's documentation for the walk's own limits (a directory
//     moved out of the volume while the walk is in it).
//   - Usage by walk counts a hard-linked file once for the first
//     mountdetect.MaxHardLinkedInodes of them (1 MiB of memory at most);
//     a volume with more is over-counted, never under-counted, and
//     Usage.UpperBound says so. A kubelet that evicts on sizeLimit may then
//     evict that pod earlier than its true use warrants; no other pod is
//     affected.
//   - Linux only; on other systems every operation returns an error
//     matching [errors.ErrUnsupported].
package emptydir
