package mountdetect

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
)

// ErrCrossesMount is matched (with errors.Is) by every error that reports a
// mount found where a single-mount operation was asked for: a mount nested
// beneath a directory given to RemoveAll, the directory itself being a mount
// point, or a mount that appeared while the walk was running. Use errors.As
// with *CrossesMountError to get the list of mounts.
var ErrCrossesMount = errors.New("crosses a mount boundary")

// ErrInvalidPath is matched by errors for paths RemoveAll refuses to touch:
// empty, relative, "/", ending in ".", or holding a ".." element anywhere.
var ErrInvalidPath = errors.New("invalid path")

// ErrOtherMount is matched by errors for a directory that must be on the
// same mount as the directory it is opened from and is not: something is
// mounted on it, or it is reached through a mount. emptydir and subpath
// return it when a filesystem is mounted on a directory above a volume
// (the pod directory, volumes/, the plugin's directory), where none
// belongs; nothing was changed.
var ErrOtherMount = fsat.ErrOtherMount

// ErrUnsupported is returned on platforms (and Linux kernels) where
// mountdetect cannot keep its guarantees. It also matches
// errors.ErrUnsupported.
var ErrUnsupported error = &fsat.PrefixError{Prefix: "mountdetect: ", Err: errors.ErrUnsupported}

// Mount describes one mount found beneath (or at) a path.
type Mount struct {
	// MountPoint is the absolute path where the mount is attached, as the
	// kernel reports it for this process (symlinks resolved). In a
	// CrossesMountError from RemoveAll or RemoveAllAt, a mount inside the
	// tree is named as the caller named the tree: the path given, then
	// the names beneath it.
	MountPoint string `json:"mountPoint"`
	// FSType is the filesystem type ("tmpfs", "nfs4", "ext4", ...).
	FSType string `json:"fsType"`
	// Source is the mount source ("server:/export", "/dev/sdb1", "tmpfs");
	// empty when it could not be learned without a second read of the
	// mount table (mounts discovered during a walk).
	Source string `json:"source"`
}

// CrossesMountError reports mounts that stopped a single-mount operation.
// It matches ErrCrossesMount with errors.Is.
type CrossesMountError struct {
	// Path is the path the operation was given.
	Path string
	// Mounts lists every mount found, sorted by mount point. When the path
	// itself is a mount point it is listed too.
	Mounts []Mount
	// DuringWalk is false when the mounts were found before anything was
	// removed (nothing was deleted) and true when they appeared while the
	// removal was running (the walk did not enter them; everything else
	// on the directory's own mount was removed).
	DuringWalk bool
}

func (e *CrossesMountError) Error() string {
	var b strings.Builder
	b.WriteString("refusing to remove ")
	b.WriteString(quoteName(e.Path))
	b.WriteString(": ")
	b.WriteString(ErrCrossesMount.Error())
	if e.DuringWalk {
		b.WriteString(" (mounts appeared during removal and were left untouched)")
	} else {
		b.WriteString(" (nothing was deleted)")
	}
	b.WriteString(":")
	for i, m := range e.Mounts {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" ")
		b.WriteString(m.String())
	}
	return b.String()
}

// String describes the mount for people, in log lines, error messages and
// the CLI's output: "MOUNTPOINT (FSTYPE from SOURCE)", leaving out what is
// empty. Each part is shown by one rule (quoteName): mount points, and
// the sources and FUSE types of mounts made by whoever writes into a
// volume, are chosen by an attacker.
func (m Mount) String() string {
	s := quoteName(m.MountPoint)
	switch {
	case m.FSType != "" && m.Source != "":
		return s + " (" + quoteName(m.FSType) + " from " + quoteName(m.Source) + ")"
	case m.FSType != "":
		return s + " (" + quoteName(m.FSType) + ")"
	case m.Source != "":
		return s + " (from " + quoteName(m.Source) + ")"
	}
	return s
}

// quoteName is how a name found on disk or in the mount table appears in a
// message: as it is when every character is printable (strconv.IsPrint:
// letters of any script and spaces included) and none is a quote or opens
// a part of a description ("(") or the next mount of a list ("; ");
// otherwise as a Go string literal (strconv.Quote), which escapes
// newlines, control and format characters (an ANSI escape, U+202E) and
// each byte of invalid UTF-8. Whoever names a mount point inside a volume
// can then neither split a log line, nor reach the terminal with an escape
// sequence, nor add a fake mount or type to a description; a quoted name
// is told from a plain one by its leading quote.
func quoteName(s string) string {
	if strings.ContainsFunc(s, needsQuote) {
		return strconv.Quote(s)
	}
	return s
}

func needsQuote(r rune) bool {
	return r == utf8.RuneError || !strconv.IsPrint(r) || r == '"' || r == '(' || r == ';'
}

// Is makes errors.Is(err, ErrCrossesMount) true.
func (e *CrossesMountError) Is(target error) bool { return target == ErrCrossesMount }

// InvalidPathError explains why a path was refused. It matches
// ErrInvalidPath with errors.Is.
type InvalidPathError struct {
	Path   string
	Reason string
}

func (e *InvalidPathError) Error() string {
	return fmt.Sprintf("invalid path %q: %s", e.Path, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidPath) true.
func (e *InvalidPathError) Is(target error) bool { return target == ErrInvalidPath }

// MoreErrorsError ends the failures RemoveAll and RemoveAllAt (and
// subpath's Check and Clean) report when there were more than the 100 they
// report one by one: N more happened beyond those listed (the ones with
// the smallest paths, sorted by path).
type MoreErrorsError struct {
	N int
}

func (e *MoreErrorsError) Error() string { return fmt.Sprintf("and %d more errors", e.N) }

// FSInfo is what Detect learns about a path.
type FSInfo struct {
	// Path is the path that was examined.
	Path string `json:"path"`
	// FSType names the filesystem from its statfs magic number ("tmpfs",
	// "ext4", ...; "unknown(0x...)" for magics this package does not know).
	FSType string `json:"fsType"`
	// Magic is the statfs f_type, as uint32 on every architecture.
	Magic uint32 `json:"magic"`
	// MountPoint reports whether Path is the root of a mount, and
	// MountPointSure whether the kernel could say so with certainty.
	MountPoint     bool `json:"mountPoint"`
	MountPointSure bool `json:"mountPointSure"`
	// HugePageSize is the page size in bytes of a hugetlbfs mount (from its
	// pagesize= option, else its block size); 0 for other filesystems.
	HugePageSize int64 `json:"hugePageSize"`
}

// Detect reports the filesystem type, mount-point status and hugetlbfs
// page size of path (emptydir.MediumOf says which emptyDir medium that
// is). The path is opened once and every answer is about that
// open file, so a rename during the call cannot mix two files' answers.
// Symlinks in path are followed, the last element included: Detect
// describes what the path leads to (IsMountPoint, by contrast, answers
// about a symlink itself, which is never a mount point).
func Detect(path string) (FSInfo, error) { return detect(path, nil) }

// IsMountPoint reports whether path (a directory or a file) is the root of
// a mount. sure is false when only the st_dev fallback was available; that
// fallback cannot see bind mounts of the same filesystem, so callers that
// are about to delete data must treat "not mounted, not sure" as unsafe.
//
// Symlinks in the parent directories are followed (so /var/lib/kubelet may
// be a symlink), and ".." after one goes where the kernel goes; a symlink
// as the last component is never a mount point, unless written with a
// trailing slash ("link/"), which names its target, as in the kernel.
// Strategies, in order: statx STATX_ATTR_MOUNT_ROOT (Linux 5.8+), openat2
// RESOLVE_NO_XDEV (5.6+), /proc/self/mountinfo, st_dev comparison.
func IsMountPoint(path string) (mounted, sure bool, err error) {
	return isMountPoint(path, autoStrategy())
}

// KernelFeatures is what the running kernel offers for telling mount
// boundaries apart, best first. Detect, IsMountPoint, NestedMounts,
// RemoveAll and DiskUsage use the best there is (see the package
// documentation for what each makes possible, and what RemoveAll refuses
// without any of them).
type KernelFeatures struct {
	// StatxMountIDUnique: statx returns STATX_MNT_ID_UNIQUE, a mount ID
	// that is never reused (Linux 6.8), and STATX_ATTR_MOUNT_ROOT.
	StatxMountIDUnique bool
	// StatxMountID: statx returns STATX_MNT_ID (Linux 5.8) and
	// STATX_ATTR_MOUNT_ROOT.
	StatxMountID bool
	// Openat2: openat2 with RESOLVE_NO_XDEV (Linux 5.6), which fails with
	// EXDEV where a path crosses a mount.
	Openat2 bool
}

// Kernel reports which of the features this package can use the running
// kernel offers. Each is probed by using it on "/" (statx, openat2), not
// inferred from the kernel release, once per process; all are false on
// other operating systems.
func Kernel() KernelFeatures { return kernelFeatures() }

// NestedMounts lists every mount strictly beneath the directory path
// (mounts on directories and on files), sorted by mount point, from one
// read of the mount table. Symlinks in path are followed. It also lists
// mounts made through another bind mount of path's filesystem onto path or
// an entry beneath it: the table names them under that other path, so
// their MountPoint lies outside path, but the kernel will not remove the
// entry they sit on and a walk of path meets the directory they cover.
// Finding those needs statx STATX_MNT_ID (Linux 5.8).
func NestedMounts(path string) ([]Mount, error) { return nestedMounts(path) }

// RemoveAll removes path and everything beneath it that lives on the same
// mount as path, and nothing else:
//
//   - if any mount is found beneath path (or path is itself a mount point)
//     before removal starts, nothing is deleted and a *CrossesMountError
//     lists every such mount;
//   - every directory is opened relative to its parent's file descriptor
//     with O_NOFOLLOW, its mount ID is compared with path's, and a
//     directory on another mount (one mounted during the walk) is never
//     entered: it is left in place and reported in a *CrossesMountError
//     with DuringWalk set;
//   - symlinks are unlinked, never followed; bind-mounted files are never
//     unlinked (the kernel refuses with EBUSY) and are reported likewise.
//
// A missing path is success. An empty, relative or root path, one whose
// last element is "." or ".." (as GNU rm refuses them), or one with a ".."
// element anywhere ("/a/link/../x": after a symlink the kernel and
// filepath.Clean disagree on where ".." leads), is refused with
// ErrInvalidPath and nothing is touched. Symlinks in the parent
// directories of path are followed; a symlink as the last element is
// removed itself.
//
// A directory moved out of the tree while the walk is inside it is emptied
// at its new place (the walk holds it by descriptor): the entries it held
// at that moment are removed there; the directory itself stays. What
// someone else removes meanwhile (another RemoveAll of the same tree, say)
// is gone, not a failure.
//
// A directory the caller may not list (mode 000 or 0300, without root) is
// removed if it is empty, as os.RemoveAll does: it is looked at without
// being opened for reading (O_PATH), with the same mount checks, and
// removed with rmdir, which refuses a mount point. One that is not empty
// is kept and reported as an *os.PathError with EACCES.
//
// Every failure is reported. A single one is returned as itself (an
// *os.PathError naming the syscall and the path, or a *CrossesMountError);
// several are joined as errors.Join does, so errors.Is and errors.As reach
// each: the *CrossesMountError for mounts met during the walk first, then
// the others sorted by path. Past 100 failures only the 100 with the
// smallest paths are listed, followed by a *MoreErrorsError counting the
// rest.
//
// The unsafe equivalent is os.RemoveAll, which descends into every nested
// mount and deletes what it finds there before failing with EBUSY.
func RemoveAll(path string, opts ...Option) error {
	return removeAll(path, newConfig(opts))
}

// RemoveAllAt is RemoveAll for the entry name of the directory open as
// dirfd: it removes name and everything beneath it that lives on the same
// mount as name, with exactly RemoveAll's guarantees, as RemoveAll does
// once it has opened the parent of its path. The parent is never resolved
// by name, so a path that could be swapped by whoever writes above the
// entry (a pod directory, say) cannot redirect the removal; a directory
// open as dirfd that was renamed or moved is still the one worked in.
//
// name must be a single element: not empty, not "." or "..", without "/"
// or NUL; anything else is refused with ErrInvalidPath. path is only a
// name for the entry, never resolved: every error message, every
// *os.PathError, CrossesMountError.Path and the mounts reported name the
// entry as path (and what lies beneath it as path/...), never as a
// /proc/self/fd name. An empty path names the entry by name. The caller
// keeps ownership of dirfd; RemoveAllAt does not close it. dirfd may be
// opened O_PATH. A missing name is success.
func RemoveAllAt(dirfd int, name, path string, opts ...Option) error {
	return removeAllAt(dirfd, name, path, newConfig(opts))
}

func newConfig(opts []Option) *config {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.workers < 1 {
		c.workers = 1
	}
	if c.strategy == strategyAuto {
		c.strategy = autoStrategy()
	}
	return &c
}

// validateRemoveName refuses a name RemoveAllAt must not act on: anything
// but one element naming an entry of the directory. path is the caller's
// name for the entry, for the error.
func validateRemoveName(name, path string) error {
	reason := ""
	switch {
	case name == "":
		reason = "empty name"
	case name == "." || name == "..":
		reason = "name is " + name
	case strings.IndexByte(name, '/') >= 0:
		reason = fmt.Sprintf("name %q is not a single element (contains /)", name)
	case strings.IndexByte(name, 0) >= 0:
		reason = fmt.Sprintf("name %q contains a NUL byte", name)
	default:
		return nil
	}
	if path == "" {
		path = name
	}
	return &InvalidPathError{Path: path, Reason: reason}
}

// Option configures RemoveAll and RemoveAllAt.
type Option interface{ apply(*config) }

type config struct {
	workers  int
	strategy strategy
	maxOpen  int // directory fds a serial walk keeps open; 0 = default
	hook     testhook.Hook
	// DiskUsage's, for its tests: the hard-linked inodes remembered (0:
	// MaxHardLinkedInodes), and a function called when the walk is over,
	// its memory still held.
	maxLinked int
	walked    func()
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Workers sets how many goroutines remove in parallel (default 1). The
// guarantees are the same for every worker count.
func Workers(n int) Option { return optionFunc(func(c *config) { c.workers = n }) }

// withTestHook makes the walk call h with testhook.RemoveAllRemoved and
// the entry's path after each entry it removes (the start directory
// included), so that nodevol's crash tests can stop a removal half-way.
// Other nodevol packages reach it as friend.RemoveAllHook.
func withTestHook(h testhook.Hook) Option { return optionFunc(func(c *config) { c.hook = h }) }

func init() {
	friend.RemoveAllHook = func(h testhook.Hook) any { return withTestHook(h) }
}

// ValidateRemovePath returns the error RemoveAll would return for path
// before looking at the filesystem: an *InvalidPathError (matching
// ErrInvalidPath) for an empty, relative or root path, one with a NUL byte,
// one whose last element is "." or "..", or one with a ".." element
// anywhere. Dry runs and nodevol check use it to refuse exactly what
// RemoveAll refuses.
func ValidateRemovePath(path string) error {
	_, _, err := validateRemovePath(path)
	return err
}

// dotReason is why a path whose last element is "." or ".." is refused:
// GNU rm's words for the same refusal.
const dotReason = "refusing to remove '.' or '..' directory"

// dotDotReason is why a path with a ".." element is refused.
const dotDotReason = `contains a ".." element, refused because after a symlink the kernel and text cleaning disagree on where ".." leads`

// validateRemovePath refuses paths RemoveAll must never act on and returns
// the cleaned path split into its parent and last element.
func validateRemovePath(path string) (dir, base string, err error) {
	switch {
	case path == "":
		return "", "", &InvalidPathError{Path: path, Reason: "empty path"}
	case strings.IndexByte(path, 0) >= 0:
		return "", "", &InvalidPathError{Path: path, Reason: "contains a NUL byte"}
	}
	// Look at the last element as given, trailing slashes aside, as GNU rm
	// does (".", "./", "a/.." are refused there too): "/a/b/." cleans to
	// "/a/b" and "/a/b/.." to "/a", neither an element the caller named.
	trimmed := strings.TrimRight(path, "/")
	if last := trimmed[strings.LastIndexByte(trimmed, '/')+1:]; last == "." || last == ".." {
		return "", "", &InvalidPathError{Path: path, Reason: dotReason}
	}
	if !filepath.IsAbs(path) {
		return "", "", &InvalidPathError{Path: path, Reason: "not absolute"}
	}
	// ".." anywhere else is refused too: after a symlink ("/a/link/../x")
	// the kernel goes to the parent of link's target while filepath.Clean
	// drops "link/..", so the path removed and the path checked or
	// reported could differ.
	for elem := range strings.SplitSeq(path, "/") {
		if elem == ".." {
			return "", "", &InvalidPathError{Path: path, Reason: dotDotReason}
		}
	}
	clean := filepath.Clean(path)
	if clean == "/" || clean == filepath.VolumeName(clean)+string(filepath.Separator) {
		return "", "", &InvalidPathError{Path: path, Reason: "refusing to remove the root directory"}
	}
	dir, base = filepath.Split(clean)
	return dir, base, nil
}
