// Package fsquota gives directories XFS and ext4 project quotas: usage
// accounting for emptyDir volumes and, on request, a hard limit equal to
// their sizeLimit. It talks to the kernel directly — no xfs_quota, no
// lsattr, no process is ever started — and keeps its state where it
// survives a restart: on the directory (its project ID) and in the
// /etc/projects (id:path) and /etc/projid (name:id) files.
//
// # What it guarantees
//
//   - Directories are handed over open: [Manager.Assign], [Manager.Clear]
//     and [Manager.Usage] act on the caller's descriptor and never open
//     the path they are given, which is only what the bookkeeping files
//     record and messages say. A path whose components someone swaps for
//     symlinks (a pod directory's, below the kubelet root) cannot redirect
//     them to another directory.
//   - A directory's project ID is read and written with the
//     FS_IOC_FSGETXATTR/FS_IOC_FSSETXATTR ioctls on that descriptor;
//     directories get FS_XFLAG_PROJINHERIT, so everything created below
//     them is charged to the project.
//   - Limits and usage go through quotactl_fd (Linux 5.14+) on the
//     directory itself, or quotactl on the filesystem's block device on
//     older kernels: the XFS interface (Q_XGETQUOTA/Q_XSETQLIM) on XFS,
//     the generic one (Q_GETQUOTA/Q_SETQUOTA) on ext4.
//   - Only what the bookkeeping files record is nodevol's: Assign adopts an
//     ID on the directory only when the projects file records it for the
//     directory's path, and Clear releases only IDs recorded for the path
//     and takes the project off the directory only when the descriptor is
//     the directory Assign returned the [Project] for. A project someone
//     else put on the directory (its owner may, outside a user namespace),
//     or a directory swapped into its place, keeps its ID, its flags and
//     its limits. The directory is known by its inode number and
//     generation (XFS and ext4 keep both on disk), so a reboot that brings
//     the disk back under another device number changes nothing.
//   - Restart-safe: Assign gives back the recorded ID to a directory the
//     files name but that lost (or never got) its tag, and adopts it when
//     it carries it; Clear needs the [Project] Assign returned, or none
//     for records made before projects had identities, and
//     [Manager.Release] releases the project of a directory that is gone,
//     through any directory on its filesystem. The files are written
//     before the directory is tagged and emptied in the reverse order, so
//     a crash at any point leaves a state the next Assign, Clear or
//     Release completes. (Release without a directory, -1, undoes the
//     bookkeeping only: the limit stays, and allocation skips that ID.)
//   - IDs are allocated from 1048577 upward, skipping IDs that either file
//     records and IDs that already have usage or limits (a directory
//     carrying an ID is itself charged as one inode, so live IDs are
//     found even when the files forgot them); probing is bounded, and past
//     half of the probes it draws at random from the whole 32-bit range,
//     so that a run of IDs made to look used (files tagged with them)
//     cannot make allocation fail.
//   - The bookkeeping files are shared safely: an exclusive flock on their
//     directory serialises every read-modify-write across goroutines and
//     processes; each file is replaced atomically and durably, keeping
//     its mode (temporary file, fsync, rename, fsync of the directory: the
//     writer nodevol uses for all its records), and temporary files a
//     killed writer left are removed by the next transaction; symlinks and
//     non-regular files are refused; lines this package does not
//     understand are kept verbatim.
//   - An ID a directory only inherited from its parent, or that the files
//     record nowhere, is never adopted or released as its own.
//   - Monitoring-only by default (limits set to none); the [Enforce] option
//     sets the hard block limit to the requested size. XFS reports an
//     exceeded project quota as ENOSPC, not EDQUOT, and enforces it for
//     root too; ext4 reports EDQUOT and lets a process with
//     CAP_SYS_RESOURCE past the limit.
//
// # When it says no
//
// Anything other than xfs or ext4, a kernel without quotactl, or a
// filesystem mounted without project quota accounting (prjquota) yields an
// [*UnsupportedError] that says which; it matches [ErrUnsupported] and
// [errors.ErrUnsupported], and callers such as emptydir then measure usage by
// walking the tree. Support is cached per mount (by mount ID, never reused
// with STATX_MNT_ID_UNIQUE on 6.8+); only positive answers are cached, and
// a quota call that finds accounting off drops the entry. On other
// operating systems every operation returns ErrUnsupported.
//
// # Not covered
//
// Files already in a directory when it is assigned keep their old project;
// hard links and renames across projects fail with EXDEV (a kernel rule).
// One directory gets one project, as with the kubelet. An ID the projects
// file records for several paths (edited by hand) is adopted by each.
// Other tools that edit the
// bookkeeping files without taking the directory lock can still race with
// this package.
package fsquota
