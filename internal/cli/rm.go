package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nodevol/nodevol/internal/base/plural"
	"github.com/nodevol/nodevol/mountdetect"
)

// rmResult is what "nodevol rm" reports about one path. The exported
// fields are the --json output, one object per line.
//
// With --dry-run, Removed and Refused say what rm would do; nothing is
// removed.
type rmResult struct {
	Path         string              `json:"path"`
	Removed      bool                `json:"removed"`
	DryRun       bool                `json:"dryRun"`
	Refused      bool                `json:"refused"`
	NestedMounts []mountdetect.Mount `json:"nestedMounts"` // never nil: [] in JSON
	// MountNamespace says whether rm ran in the host's (nsgate.go).
	MountNamespace mountNamespaceJSON `json:"mountNamespace"`
	failureJSON

	kind       entryKind // what the path was before removal
	duringWalk bool      // the refusing mounts appeared while removing
	invalid    bool      // the path was refused before anything was looked at
	err        error
}

func (r *rmResult) code() int { return exitCode(r.err, r.Refused) }

func (r *rmResult) setNamespace(ns mountNamespaceJSON) { r.MountNamespace = ns }

func (r *rmResult) setErr(err error) {
	r.err = err
	r.record(err)
	r.invalid = errors.Is(err, mountdetect.ErrInvalidPath)
}

// removePath removes path with mountdetect.RemoveAll and sorts the outcome
// into removed, refused (a mount was found) or failed.
func removePath(path string, workers int) rmResult {
	r := rmResult{Path: path, NestedMounts: []mountdetect.Mount{}}
	if err := refuseDotDot(path); err != nil {
		r.setErr(err)
		return r
	}
	// Only to word the report ("nothing to remove" vs "removed");
	// RemoveAll itself treats a missing path as success.
	if fi, err := os.Lstat(path); err == nil {
		r.kind = kindOf(fi)
	} else if !errors.Is(err, fs.ErrNotExist) {
		r.kind = kindFile // exists as far as we know; RemoveAll will say more
	}
	err := mountdetect.RemoveAll(path, mountdetect.Workers(workers))
	if err == nil {
		r.Removed = r.kind != kindMissing
		return r
	}
	var crossed *mountdetect.CrossesMountError
	if !errors.As(err, &crossed) {
		r.setErr(err)
		return r
	}
	r.Refused = true
	r.duringWalk = crossed.DuringWalk
	r.NestedMounts = append(r.NestedMounts, crossed.Mounts...)
	// RemoveAll joins a refusal during the walk with any other failure it
	// met; keep those as errors.
	if rest := withoutCrossesMount(err); rest != nil {
		r.setErr(rest)
	}
	return r
}

// withoutCrossesMount returns err minus its *CrossesMountError parts, or
// nil when nothing else is left.
func withoutCrossesMount(err error) error {
	var crossed *mountdetect.CrossesMountError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range joined.Unwrap() {
			if !errors.As(e, &crossed) {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	if errors.As(err, &crossed) {
		return nil
	}
	return err
}

func kindOf(fi fs.FileInfo) entryKind {
	switch {
	case fi.IsDir():
		return kindDir
	case fi.Mode()&fs.ModeSymlink != 0:
		return kindSymlink
	}
	return kindFile
}

// planRemoval is rm --dry-run: it applies RemoveAll's path rules and then
// the same examination as "check", and says what rm would do.
func planRemoval(path string) rmResult {
	r := rmResult{Path: path, DryRun: true, NestedMounts: []mountdetect.Mount{}}
	if err := refuseDotDot(path); err != nil {
		r.setErr(err)
		return r
	}
	if err := mountdetect.ValidateRemovePath(path); err != nil {
		r.setErr(err)
		return r
	}
	// RemoveAll acts on the cleaned path: "/vol/link/" removes the link.
	c := examine(filepath.Clean(path))
	r.kind = c.kind
	switch {
	case c.err != nil:
		r.setErr(c.err)
	case !c.Exists:
	case c.SafeToRemove:
		r.Removed = true
	default:
		r.Refused = true
		if c.MountPoint || !c.MountPointSure {
			// RemoveAll lists the path itself when it is (or may be) a
			// mount point.
			r.NestedMounts = append(r.NestedMounts, mountdetect.Mount{MountPoint: filepath.Clean(path), FSType: c.FSType})
		}
		r.NestedMounts = append(r.NestedMounts, c.NestedMounts...)
	}
	return r
}

// rmHelp is the help of "nodevol rm", after its usage line.
const rmHelp = `Remove each absolute PATH and everything beneath it that lives on the same
mount, and nothing else. Before anything is deleted the whole tree is
checked: if PATH is a mount point or any mount is nested beneath it (a NAS,
a bind-mounted directory or file), rm refuses, lists every such mount and
deletes nothing. Symlinks are removed, never followed. A missing PATH is
not an error. A PATH with a ".." element anywhere is refused (after a
symlink the kernel and text cleaning disagree on where ".." leads).

rm refuses, deleting nothing, when this process is not in the host's mount
namespace (a container's: a NAS mounted only in the host's is not seen from
here, and removing the directory it is mounted on would detach it on the
host), or when that cannot be told because PID 1 here is not the host's
init (a container with a PID namespace of its own; --host-proc DIR names
the host's /proc mounted into it). --allow-foreign-mount-namespace lets it
go on. When it cannot be told only because reading PID 1's namespaces takes
root, rm warns and goes on. --dry-run refuses as rm would.

Exit status: 0 every path removed (or missing), 1 some removal was refused
because of a mount, 2 some path is invalid or could not be removed, rm was
refused because of the mount namespace, or bad usage.`

func runRm(fs *flagSet, args []string, stdout, stderr io.Writer) int {
	dryRun := fs.Bool("dry-run", false, "say what would be removed or refused; delete nothing")
	asJSON := fs.Bool("json", false, "print one JSON object per path per line")
	workers := fs.Int("workers", 1, "goroutines removing in parallel (at least 1); the guarantees are the same for any number")
	nsFlags := addNamespaceFlags(fs.FlagSet, true)
	paths, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if *workers < 1 {
		return usageError(fs, stderr, "--workers must be at least 1, got %d", *workers)
	}
	if len(paths) == 0 {
		return usageError(fs, stderr, "no PATH given")
	}
	blank := func(path string) rmResult {
		return rmResult{Path: path, DryRun: *dryRun, NestedMounts: []mountdetect.Mount{}}
	}
	act := func(path string) rmResult {
		if *dryRun {
			return planRemoval(path)
		}
		return removePath(path, *workers)
	}
	return eachPath("rm", nsFlags, paths, *dryRun, *asJSON, stdout, stderr, blank, act, writeRmHuman)
}

// writeRmHuman reports one path: what was removed on stdout, refusals and
// errors on stderr, every path and message escaped by display.
func writeRmHuman(stdout, stderr io.Writer, r *rmResult) {
	path := display(r.Path)
	would := func(did, wouldDo string) string {
		if r.DryRun {
			return wouldDo
		}
		return did
	}
	if r.Refused {
		switch {
		case r.DryRun:
			fmt.Fprintf(stderr, "would refuse %s: %s; nothing would be deleted:\n", path, mountCount(r))
		case r.duringWalk:
			fmt.Fprintf(stderr, "refused %s: %s appeared during removal and %s left untouched; everything else on the volume's own mount was removed:\n",
				path, mountCount(r), plural.Of(len(r.NestedMounts), "was", "were"))
		default:
			fmt.Fprintf(stderr, "refused %s: %s; nothing was deleted:\n", path, mountCount(r))
		}
		for _, m := range r.NestedMounts {
			fmt.Fprintf(stderr, "  %s\n", m.String())
		}
		if !r.duringWalk {
			fmt.Fprintf(stderr, "unmount %s first (%s data is not the volume's to delete), then run nodevol rm again\n",
				plural.Of(len(r.NestedMounts), "it", "them"), plural.Of(len(r.NestedMounts), "its", "their"))
		}
	}
	if r.err != nil {
		suffix := ""
		if r.invalid {
			suffix = "; nothing was touched"
		}
		writeErrors(stderr, "nodevol rm: ", r.err, suffix)
	}
	if r.Refused || r.err != nil {
		return
	}
	switch {
	case r.kind == kindMissing:
		fmt.Fprintf(stdout, "nothing to remove: %s does not exist\n", path)
	case r.kind == kindSymlink:
		fmt.Fprintf(stdout, "%s the symlink %s (its target %s touched)\n", would("removed", "would remove"), path, would("was not", "would not be"))
	default:
		fmt.Fprintf(stdout, "%s %s\n", would("removed", "would remove"), path)
	}
}

// mountCount says how many mounts stopped the removal, counting the path
// itself when it is one of them.
func mountCount(r *rmResult) string {
	n := len(r.NestedMounts)
	self := false
	for _, m := range r.NestedMounts {
		self = self || isPath(m.MountPoint, r.Path)
	}
	switch {
	case self && n == 1:
		return "it is itself a mount point"
	case self:
		return "it is itself a mount point, and " + plural.Count(n-1, "mount") + " beneath it"
	case r.duringWalk:
		return plural.Count(n, "mount")
	}
	return plural.Count(n, "mount") + " beneath it"
}

// isPath reports whether mountPoint, as the kernel names it (symlinks
// resolved), is path.
func isPath(mountPoint, path string) bool {
	clean := filepath.Clean(path)
	if mountPoint == clean {
		return true
	}
	real, err := filepath.EvalSymlinks(clean)
	return err == nil && real == mountPoint
}
