// Package friend carries the entry points one nodevol package offers
// other nodevol packages and their tests but not its public API: the
// options that install test hooks, and the mount table's question that
// only subpath asks. An owning package sets its part in an init function
// (friend imports none of them, it stands under them, so the values are
// typed any and the caller asserts them to the owner's type). Like every
// package under internal/, only this repository's modules can import it.
//
// The variables are set once, before main runs, and never changed: they
// are a table of functions, not state. A hook itself still travels in an
// option, never in a package variable.
package friend

import "github.com/nodevol/nodevol/internal/base/testhook"

var (
	// RemoveAllHook returns a mountdetect.Option that makes RemoveAll and
	// RemoveAllAt call h with testhook.RemoveAllRemoved and the entry's
	// path after each entry they remove (the start directory included).
	RemoveAllHook func(h testhook.Hook) any

	// QuotaHook returns an fsquota.Option that makes Assign and Clear call
	// h at their crash points (testhook.QuotaRecorded, QuotaLimited,
	// QuotaUntagged).
	QuotaHook func(h testhook.Hook) any

	// QuotaKernel returns an fsquota.Option that makes the Manager keep
	// project limits in k instead of asking quotactl (the fsxattr ioctls
	// that tag directories stay real): tests of code above fsquota can
	// then assign and clear projects on a kernel without quotas. A nil k
	// changes nothing.
	QuotaKernel func(k testhook.QuotaKernel) any

	// EmptyDirHook returns an emptydir.Option that makes SetUp, TearDown
	// and ResizeVolume call h at their crash points, and RemoveAll after
	// each entry it removes.
	EmptyDirHook func(h testhook.Hook) any

	// BindWithin reports whether the mount whose root is the file open as
	// fd shows a part of the directory open as dirFd — a bind mount of
	// the directory or of something inside it, which is what the
	// kubelet's subPath mounts of a volume look like (path and dirPath
	// name them in errors). table is a *mountdetect.MountTable (nil: the
	// kernel's, read now). Set on Linux only.
	BindWithin func(table any, fd int, path string, dirFd int, dirPath string) (bool, error)
)
