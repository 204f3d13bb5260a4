package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/base/plural"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// entryKind is what a path names, as lstat sees it.
type entryKind int

const (
	kindMissing entryKind = iota
	kindDir
	kindFile // a regular file, or a device, socket or fifo: anything unlinked, not walked
	kindSymlink
)

func (k entryKind) String() string {
	switch k {
	case kindMissing:
		return "missing"
	case kindDir:
		return "directory"
	case kindFile:
		return "file"
	case kindSymlink:
		return "symlink"
	}
	return fmt.Sprintf("entryKind(%d)", int(k))
}

// checkResult is what "nodevol check" reports about one path. The exported
// fields are the --json output, one object per line; their names are part
// of the CLI's contract.
type checkResult struct {
	Path           string              `json:"path"`
	Exists         bool                `json:"exists"`
	MountPoint     bool                `json:"mountPoint"`
	MountPointSure bool                `json:"mountPointSure"`
	FSType         string              `json:"fsType"`
	Medium         volume.Medium       `json:"medium"`
	HugePageSize   string              `json:"hugePageSize"` // "2Mi"; "" when not hugetlbfs
	NestedMounts   []mountdetect.Mount `json:"nestedMounts"` // never nil: [] in JSON
	SafeToRemove   bool                `json:"safeToRemove"`
	// MountNamespace says whether the answers are the host's (nsgate.go).
	MountNamespace mountNamespaceJSON `json:"mountNamespace"`
	failureJSON

	kind     entryKind
	pageSize int64               // HugePageSize in bytes, for scan; 0 when not hugetlbfs
	target   string              // a symlink's target
	on       []mountdetect.Mount // scan: the mounts on the directory itself (several when stacked)
	invalid  bool                // the path was refused before anything was looked at
	err      error
}

// code is the exit code this result calls for.
func (r *checkResult) code() int { return exitCode(r.err, !r.SafeToRemove) }

func (r *checkResult) fail(err error) checkResult {
	r.err = err
	r.record(err)
	r.SafeToRemove = false
	return *r
}

// examine learns everything "check" reports about path. It is also how
// "rm --dry-run" decides, so the two can never disagree.
//
// A path rm refuses before looking at it is refused, with rm's reason: one
// with a ".." element (refuseDotDot), then whatever RemoveAll refuses (a
// relative path, a last element "."), except "/": it is examined, and
// found a mount point, which is the answer (unsafe) anyway. Any other path
// is examined cleaned, as rm acts on it: "/vol/link/" is the link, not the
// directory the kernel would reach through it. Path is reported as given.
//
// safeToRemove answers "would nodevol rm remove this without meeting a
// mount?": a missing path is safe (nothing to remove); a symlink is safe
// (rm unlinks the link and never follows it); anything else must not be a
// mount point, the kernel must be sure of that, and a directory must have
// no mount beneath it.
func examine(path string) checkResult {
	if err := refuseDotDot(path); err != nil {
		r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}, invalid: true}
		return r.fail(err)
	}
	if err := mountdetect.ValidateRemovePath(path); err != nil && strings.Trim(path, "/") != "" {
		r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}, invalid: true}
		return r.fail(err)
	}
	r := examineIn(nil, filepath.Clean(path))
	r.Path = path
	return r
}

// examineIn is examine answering the mount-table questions from tab, or
// from the kernel's table now when tab is nil ("scan" reads the table
// once for every volume).
func examineIn(tab *mountdetect.MountTable, path string) checkResult {
	r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}}
	if path == "" {
		return r.fail(errors.New("empty path"))
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		r.SafeToRemove = true
		return r
	}
	if err != nil {
		return r.fail(err)
	}
	r.Exists = true
	switch {
	case fi.IsDir():
		r.kind = kindDir
	case fi.Mode()&fs.ModeSymlink != 0:
		r.kind = kindSymlink
		return examineSymlink(r, tab.Detect) // a nil table asks the kernel
	default:
		r.kind = kindFile
	}

	info, nested, err := detectAt(tab, path, r.kind)
	if errors.Is(err, fs.ErrNotExist) { // removed since the lstat
		return checkResult{Path: path, NestedMounts: r.NestedMounts, SafeToRemove: true}
	}
	if err != nil {
		return r.fail(err)
	}
	r.MountPoint, r.MountPointSure = info.MountPoint, info.MountPointSure
	r.FSType, r.Medium = info.FSType, emptydir.MediumOf(info)
	if info.HugePageSize > 0 {
		r.pageSize = info.HugePageSize
		r.HugePageSize = volume.FormatQuantity(info.HugePageSize)
	}
	r.NestedMounts = append(r.NestedMounts, nested...)
	r.SafeToRemove = !r.MountPoint && r.MountPointSure && len(r.NestedMounts) == 0
	return r
}

// examineSymlink describes a symlink as rm sees it: rm removes the link
// and never follows it, so the report is about the link (never a mount
// point, on its parent's filesystem), not about its target.
func examineSymlink(r checkResult, detect func(string) (mountdetect.FSInfo, error)) checkResult {
	r.target, _ = os.Readlink(r.Path)
	mounted, sure, err := mountdetect.IsMountPoint(r.Path)
	if err != nil {
		return r.fail(fmt.Errorf("mount point check: %w", err))
	}
	parent, err := detect(filepath.Dir(r.Path))
	if err != nil {
		return r.fail(fmt.Errorf("detect parent directory: %w", err))
	}
	r.MountPoint, r.MountPointSure = mounted, sure
	r.FSType = parent.FSType
	r.SafeToRemove = !mounted && sure
	return r
}

// checkHelp is the help of "nodevol check", after its usage line.
const checkHelp = `Report, for each path, whether it exists, whether it is a mount point (and
whether the kernel is sure), its filesystem type, emptyDir medium and
hugepage size, every mount nested beneath it, and whether "nodevol rm"
would remove it without crossing a mount. Nothing is changed. Each path is
examined as rm would act on it: cleaned ("/vol/link/" is the link), and
refused with exit status 2 where rm refuses it: a relative path, a path
with a ".." element, or one whose last element is "." (GNU rm's "refusing
to remove '.' or '..' directory").

The answers are about this process's mount namespace. When that is not the
host's (a container's), or it cannot be told, a warning on stderr says so
(with --json, the "mountNamespace" field): a mount made only in the host's
namespace is not seen from here. --host-proc DIR names the host's /proc
mounted into a container, to compare with its PID 1.

Exit status: 0 every path is safe to remove (or missing), 1 some path is
unsafe, 2 some path could not be examined or bad usage.`

func runCheck(fs *flagSet, args []string, stdout, stderr io.Writer) int {
	asJSON := fs.Bool("json", false, "print one JSON object per path per line")
	nsFlags := addNamespaceFlags(fs.FlagSet, false)
	paths, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(paths) == 0 {
		return usageError(fs, stderr, "no PATH given")
	}
	ns, err := nsFlags.gate("check")
	if err != nil {
		fmt.Fprintf(stderr, "nodevol check: %s\n", display(err.Error()))
		return ExitError
	}
	if !*asJSON {
		ns.warn(stderr)
	}
	enc := newJSONEncoder(stdout)
	code = ExitOK
	for i, p := range paths {
		r := examine(p)
		r.MountNamespace = ns.json()
		code = max(code, r.code())
		if *asJSON {
			if err := enc.Encode(&r); err != nil {
				fmt.Fprintf(stderr, "nodevol check: write report: %v\n", err)
				return ExitError
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		writeCheckHuman(stdout, &r)
	}
	return code
}

// writeCheckHuman prints a short block about one path, every name and
// message escaped by display:
//
//	/var/lib/kubelet/pods/…/volumes/kubernetes.io~empty-dir/cache
//	  exists:        yes (directory)
//	  mount point:   no (sure)
//	  ...
//	  verdict:       UNSAFE: 1 mount beneath it; nodevol rm would refuse and delete nothing
func writeCheckHuman(w io.Writer, r *checkResult) {
	line := func(label, value string) { fmt.Fprintf(w, "  %-15s%s\n", label+":", display(value)) }
	fmt.Fprintln(w, display(r.Path))
	if r.err != nil {
		if msgs, more := errorList(r.err); len(msgs) == 1 && more == 0 {
			line("error", msgs[0])
		} else {
			line("errors", fmt.Sprint(len(msgs)+more))
			writeErrors(w, "    ", r.err, "")
		}
		if r.invalid {
			line("verdict", "REFUSED: invalid path, nothing was looked at (nodevol rm refuses it too)")
		} else {
			line("verdict", "UNSAFE: could not be examined")
		}
		return
	}
	if !r.Exists {
		line("exists", "no")
		line("verdict", "safe: nothing to remove")
		return
	}
	exists := "yes (" + r.kind.String()
	if r.kind == kindSymlink {
		exists += " to " + r.target + "; rm removes the link, never its target"
	}
	line("exists", exists+")")
	switch {
	case !r.MountPointSure:
		line("mount point", yesNo(r.MountPoint)+" (NOT SURE: this kernel can only compare device numbers, which miss bind mounts)")
	default:
		line("mount point", yesNo(r.MountPoint)+" (sure)")
	}
	line("filesystem", r.FSType)
	if r.kind != kindSymlink {
		line("medium", r.Medium.String())
	}
	if r.HugePageSize != "" {
		line("hugepage size", r.HugePageSize)
	}
	if r.kind == kindDir {
		if len(r.NestedMounts) == 0 {
			line("nested mounts", "none")
		} else {
			line("nested mounts", fmt.Sprint(len(r.NestedMounts)))
			for _, m := range r.NestedMounts {
				fmt.Fprintf(w, "    %s\n", m.String())
			}
		}
	}
	if r.SafeToRemove {
		switch r.kind {
		case kindSymlink:
			line("verdict", "safe to remove: rm unlinks the symlink and never follows it")
		case kindFile:
			line("verdict", "safe to remove: it is not a mount point")
		default:
			line("verdict", "safe to remove: nothing it holds is on another mount")
		}
		return
	}
	line("verdict", "UNSAFE: "+unsafeReason(r))
}

// unsafeReason says why a path that exists is not safe to remove.
func unsafeReason(r *checkResult) string {
	var why []string
	if r.MountPoint {
		why = append(why, "it is itself a mount point ("+r.FSType+"); unmount it first")
	} else if !r.MountPointSure {
		why = append(why, "cannot tell for sure that it is not a mount point")
	}
	if n := len(r.NestedMounts); n > 0 {
		why = append(why, plural.Count(n, "mount")+" beneath it")
	}
	return strings.Join(why, "; ") + "; nodevol rm would refuse and delete nothing"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
