// Package mountdetect answers "what is mounted where" for a node agent and
// removes directory trees without ever leaving the mount they start on.
//
// # The guarantee
//
// [RemoveAll](path) deletes path and everything beneath it that lives on the
// same mount as path, and nothing else:
//
//   - One mount. It never unlinks anything on another mount. Mount
//     boundaries are recognised by mount ID (statx STATX_MNT_ID_UNIQUE or
//     STATX_MNT_ID) or by openat2's RESOLVE_NO_XDEV, so a bind mount of the
//     same filesystem — invisible to an st_dev comparison — is a boundary
//     too, and so is a bind-mounted file (the kernel refuses to unlink a
//     mount point with EBUSY; RemoveAll reports it).
//   - No escape. Below path nothing is resolved by name: every directory is
//     opened relative to its parent's file descriptor with O_NOFOLLOW, and
//     entries are removed with unlinkat. A symlink is unlinked, never
//     followed; a directory swapped for a symlink mid-walk is unlinked as a
//     symlink; a directory moved out of the tree before the walk opens it
//     is not followed (one moved while the walk is inside it: see below).
//   - Refuse before touching. If the mount table shows any mount beneath
//     path, or path is itself a mount point, nothing is deleted and a
//     [*CrossesMountError] lists every mount. Mounts are matched by where
//     their mount point lies in path's filesystem, not only by the text of
//     their mount point: a mount made through a second bind mount of a
//     parent directory (listed under that other path) still sits on an
//     entry of the tree, and is refused up front like the others. A mount that appears during the
//     walk is not entered: a directory whose mount ID differs is skipped,
//     and a directory the walk had already opened keeps naming the covered
//     directory (an fd is immune to later mounts), whose rmdir then fails
//     with EBUSY. Either way the error lists the mount, with DuringWalk set.
//
// [RemoveAllAt](dirfd, name, path) is the same removal for the entry name of a
// directory the caller already holds open: nothing above the entry is
// resolved by name, so a caller that reached the parent by descriptor
// (opening each component with O_NOFOLLOW) keeps that guarantee through
// the removal. path only names the entry: every error, CrossesMountError.Path
// and the mounts reported use it, never a /proc/self/fd name.
//
// This is what the kubelet's emptyDir teardown lacks: it ends in
// [os.RemoveAll], which descends into a NAS or NFS share mounted inside the
// volume and empties it before failing with EBUSY on the mount point.
//
// # Which mount namespace
//
// Every answer is about the mount table of the calling process's mount
// namespace. A process in another one — a container's, a debug pod's, a
// private namespace — reads another table: a NAS mounted in the host's
// namespace only is not in it, so a directory holding that NAS on the host
// is, here, a directory like any other, and RemoveAll removes it (the
// kernel then detaches the host's mount). [CheckMountNamespace] says whether
// this process runs in the host's mount namespace ([MountNamespaceHost]),
// another one ([MountNamespaceForeign]), or that it cannot be told
// ([MountNamespaceUnknown], with the reason): it compares its own namespace
// with that of PID 1, when PID 1 of the proc filesystem ([HostProc]: a
// container's own /proc shows the container's init as PID 1) is the init
// of the initial PID namespace, and otherwise recognises the initial mount
// namespace by the fixed inode Linux 6.18 gives it. Code about to remove
// something for the host should not go on unless the state is
// MountNamespaceHost; nodevol rm and teardown refuse when it is foreign.
//
// # Looking without asking
//
// A filesystem mounted where a node agent looks may not answer: a FUSE
// daemon that hung, a hard NFS mount whose server is gone. [LookAt] looks
// at a directory entry with statx alone (AT_STATX_DONT_SYNC: type, device,
// mount IDs, whether something is mounted on it), opens a mount root only
// O_PATH, and [MountTable.MountOf] gives the type and source of the mount
// from the table by mount ID: nothing is asked of the mounted filesystem.
// RemoveAll and DiskUsage look at what they meet the same way.
//
// # Looking without holding
//
// In a mount namespace other than the one that mounted it (a node agent in
// a container, with the kubelet root propagated), a volume's mount is a
// propagated copy, and a descriptor open on the copy's root (O_PATH
// included) makes the owner's umount2 of the original fail with EBUSY
// for as long as it is open. An entry looked at with [LookOnly] is never
// opened: [MountTable.MountsOnRoot] lists the mounts on and beneath a
// mount root from the table by its mount ID, and [MountTable.Child] answers
// for a directory on its parent's mount from the parent ([MountTable.Parent],
// read once for all its entries). Only the statx itself holds the mount,
// for the duration of the system call.
//
// # Cost
//
// The mount table (/proc/self/mountinfo) is read once per RemoveAll, before
// the walk (and once more after it when mounts appeared meanwhile, to name
// their types), never once per directory: it costs milliseconds on a node with
// thousands of mounts, while the per-directory check is one statx (or one
// openat2), independent of the number of mounts. Directories are listed
// with getdents64 into a pooled 1 MiB buffer; on disk filesystems the files
// of a batch are unlinked in inode order, which is markedly faster on ext4
// and XFS (on ext4 a directory too large for the buffer is read in batches
// of up to 16 MiB, up to ~500,000 entries and some 24 MiB with their parsed
// entries, so that the order spans most of it); on tmpfs, where inode
// numbers say nothing of locality, in the order listed. The walk uses an
// explicit stack and keeps at most 128 directory fds open, reopening
// shallower directories through ".." (verified by device and inode) on the
// way back up, so trees far deeper than PATH_MAX need bounded memory and
// fds. Memory is bounded by one batch per goroutine, whatever the size of
// a directory, plus the names of the subdirectories met in each open
// directory's current batch. A walk goroutine yields the processor every
// 256 system calls: one that never reschedules has its P taken away
// mid-syscall by the Go runtime's monitor. [Workers](n) removes with n
// goroutines and the same guarantees. [DiskUsage] is the same serial walk,
// counting instead of removing; to count a hard-linked file once it
// remembers at most [MaxHardLinkedInodes] of them (a 1 MiB table), and
// past that over-counts and says so ([Usage].UpperBound), so no tree makes
// it hold more. docs/benchmarks.md compares RemoveAll with GNU rm -rf and
// os.RemoveAll on every shape measured, and says what the yield saves.
//
// # Kernel versions
//
//   - statx STATX_MNT_ID_UNIQUE: Linux 6.8; STATX_MNT_ID and
//     STATX_ATTR_MOUNT_ROOT: Linux 5.8.
//   - openat2 with RESOLVE_NO_XDEV: Linux 5.6.
//   - Older kernels: [IsMountPoint] falls back to /proc/self/mountinfo and
//     finally to comparing st_dev, which cannot see same-filesystem bind
//     mounts and therefore answers "not mounted, not sure". RemoveAll
//     refuses to run at all ([ErrUnsupported]) rather than offer a weaker
//     guarantee.
//   - CheckMountNamespace: the initial PID namespace's fixed inode
//     (PID_NS_INIT_INO) since Linux 3.8, NS_GET_NSTYPE since 4.11; the
//     initial mount namespace's fixed inode (MNT_NS_INIT_INO) since 6.18 —
//     on older kernels a process that may not read PID 1's namespaces
//     (not root), or whose /proc belongs to another PID namespace, can
//     only be told when it is itself in the initial mount namespace.
//   - Other operating systems: every function returns ErrUnsupported
//     (CheckMountNamespace: unknown, with Err matching ErrUnsupported).
//
// # What is not covered
//
//   - Mounts in other mount namespaces are invisible from this one; a
//     directory that is a mount point only in another namespace is removed
//     here like any directory (the kernel detaches the other namespace's
//     mount; that mount's data is not touched). RemoveAll does not check
//     which namespace it runs in; CheckMountNamespace tells the caller.
//   - A writer racing with RemoveAll inside the tree can keep creating
//     files; RemoveAll lists a directory again a bounded number of times and
//     then reports ENOTEMPTY.
//   - A directory moved out of the tree while the walk is inside it (after
//     the walk opened it) is emptied at its new place: the walk works
//     through the descriptor it holds, so the entries the directory held at
//     that moment, and any added to it before the walk lists them, are
//     removed wherever the directory now is (on the same mount; the walk
//     still never leaves it). The emptied directory itself stays there;
//     a symlink or file that took its old name in the tree is unlinked,
//     never followed.
//   - Hard links: unlinking a file's last name inside the tree frees data
//     that another name outside the tree (on the same mount) still shares —
//     the outside name keeps it alive, as with any unlink.
//   - Symlinks in the parent directories of path are followed (path is the
//     caller's, trusted), as /var/lib/kubelet is often a symlink.
package mountdetect
