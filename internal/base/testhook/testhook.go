// Package testhook names the points in nodevol's code where a test may run
// code of its own — the crash tests kill the process there, to prove that
// whatever is on disk at that instant is recovered by the next volume
// manager — and carries the hooks without a package-level variable: a Hook
// travels in an option or an unexported field, and is nil outside tests.
//
// No public API takes a Hook: the options that install one are unexported
// in the packages that take them (mountdetect, fsquota, emptydir), and
// nodevol's tests in other packages reach them through package friend.
package testhook

// Point names one step of an operation: the instant right after it.
type Point string

// The points. Each is reached by the production code path itself; a test
// that stops there sees exactly what a crash at that instant leaves.
const (
	// emptydir SetUp, in order. The path is the volume directory.

	// SetUpDirCreated: the volume directory exists with its mode; nothing
	// is recorded yet.
	SetUpDirCreated Point = "setup-dir-created"
	// SetUpQuotaIntent: the metadata says a quota project is being
	// assigned to the directory (Default medium with a quota manager);
	// Assign has not been called.
	SetUpQuotaIntent Point = "setup-quota-intent"
	// SetUpQuotaAssigned: Assign returned the project ID; the metadata
	// does not record the ID yet.
	SetUpQuotaAssigned Point = "setup-quota-assigned"
	// SetUpMetadataWritten: the metadata is final. For a tmpfs or
	// hugetlbfs it records the mount, which is not attached yet (with an
	// embedder's mounter: not made yet, recorded as pending).
	SetUpMetadataWritten Point = "setup-metadata-written"
	// SetUpMounted: the tmpfs or hugetlbfs is attached to the volume
	// directory; no ready marker yet. With an embedder's mounter the
	// metadata records the mount as pending (its source, not its IDs).
	SetUpMounted Point = "setup-mounted"
	// SetUpMountRecorded: with an embedder's mounter, the mount's IDs are
	// recorded too; no ready marker yet.
	SetUpMountRecorded Point = "setup-mount-recorded"
	// SetUpReady: the ready marker is on disk; SetUp is about to return.
	SetUpReady Point = "setup-ready"

	// emptydir TearDown, in order. The path is the volume directory.

	// TearDownBeforeUnmount: the last check of the volume's own mount is
	// done; umount2 is next (the window emptydir's documentation names).
	TearDownBeforeUnmount Point = "teardown-before-unmount"
	// TearDownUnmounted: the volume's tmpfs or hugetlbfs is unmounted;
	// its directory is still there.
	TearDownUnmounted Point = "teardown-unmounted"
	// TearDownQuotaCleared: the quota project is cleared; the directory
	// is still there.
	TearDownQuotaCleared Point = "teardown-quota-cleared"
	// TearDownRemoved: the volume directory is gone; the metadata and
	// ready marker are still there.
	TearDownRemoved Point = "teardown-removed"
	// TearDownDone: the metadata directory is gone too; TearDown is about
	// to return.
	TearDownDone Point = "teardown-done"

	// emptydir ResizeVolume. The path is the volume directory.

	// ResizeProven: the mount on the open volume directory is proven the
	// volume's own tmpfs; it is reconfigured through that descriptor next.
	ResizeProven Point = "resize-proven"

	// RemoveAllRemoved: mountdetect's RemoveAll removed one entry (the
	// path names it). With several workers, called from each.
	RemoveAllRemoved Point = "removeall-removed"

	// fsquota, with the directory's path.

	// QuotaRecorded: Assign wrote both bookkeeping files; the limit and
	// the directory's project ID are not set yet.
	QuotaRecorded Point = "quota-recorded"
	// QuotaLimited: Assign set the project's limit; the directory does
	// not carry the project ID yet.
	QuotaLimited Point = "quota-limited"
	// QuotaUntagged: Clear removed the limit and the directory's project
	// ID; the bookkeeping files still name the project.
	QuotaUntagged Point = "quota-untagged"
)

// Hook is called at a Point with the path it concerns. It may be called
// from several goroutines at once.
type Hook func(p Point, path string)

// At calls h, when there is one.
func (h Hook) At(p Point, path string) {
	if h != nil {
		h(p, path)
	}
}

// QuotaKernel stands in for the quotactl half of the kernel in fsquota
// (friend.QuotaKernel), on kernels without project quotas: the
// fsxattr ioctls that tag directories stay real, the project limits live
// here. Every project has quota accounting on and no usage.
type QuotaKernel interface {
	// Limit returns project id's hard block limit in bytes (0: none).
	Limit(id uint32) (hardBytes int64, err error)
	// SetLimit sets project id's hard block limit (0: none).
	SetLimit(id uint32, hardBytes int64) error
}
