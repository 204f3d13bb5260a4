package subpath

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/errlist"
	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// testHookAfterMountTable, when set by a test, runs right after the
// examination has read the mount table (to mount something "during the
// walk").
var testHookAfterMountTable func()

// testHookBeforeAct, when set by a test, runs between Clean's examination
// and its first change.
var testHookBeforeAct func()

// tree is one volume's subpath directory, opened from the kubelet root.
type tree struct {
	dir     string // display path of volume-subpaths/<volume>
	name    string // <volume>
	volPath string // display path of the volume directory

	root   *fsat.Dir
	parent *fsat.Dir // <root>/pods/<uid>/volume-subpaths
	sub    *fsat.Dir // volume-subpaths/<volume>; nil when not a directory
	isLink bool      // a symlink or file where volume-subpaths/<volume> belongs
	// mountedOn: something is mounted on volume-subpaths/<volume>; it is
	// not opened, and the examination refuses.
	mountedOn bool
	vol       *fsat.Dir // the volume directory; nil when it does not exist
}

// open reaches the volume's subpath directory and the volume directory by
// descriptors from the root. A nil tree and nil error: nothing there.
func (c *Cleaner) open(podUID, plugin, vol string) (_ *tree, err error) {
	dir, err := c.layout.VolumeSubpathsDir(podUID, vol)
	if err != nil {
		return nil, err
	}
	volPath, err := c.layout.VolumeDir(podUID, plugin, vol)
	if err != nil {
		return nil, err
	}
	t := &tree{dir: dir, name: vol, volPath: volPath}
	defer func() {
		if err != nil || t.parent == nil || (t.sub == nil && !t.isLink && !t.mountedOn) {
			t.close()
		}
	}()
	t.root, err = fsat.OpenRoot(c.layout.Root())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pods, err := t.root.OpenDir("pods")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer pods.Close()
	pod, err := pods.OpenDir(podUID, fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	// Like emptydir's volumes and plugins directories, volume-subpaths
	// must be on the pod directory's own mount: a share mounted there is
	// never walked, let alone emptied.
	t.parent, err = pod.OpenDir("volume-subpaths", fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// Something mounted on volume-subpaths/<volume> is never opened (its
	// filesystem would be asked), whenever it was mounted: OpenDir with
	// SameMount refuses to step onto it; it is reported by the
	// examination.
	t.sub, err = t.parent.OpenDir(vol, fsat.SameMount)
	switch {
	case err == nil:
	case errors.Is(err, fsat.ErrOtherMount):
		t.mountedOn = true
		return t, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, fsat.ErrSymlink), errors.Is(err, unix.ENOTDIR):
		t.isLink = true // Clean unlinks it; nothing below it to examine
		return t, nil
	default:
		return nil, err
	}
	// The volume directory: its parent is reached like emptydir reaches
	// it; the directory itself may be missing, a symlink or a file (the
	// teardown unlinks those), and then no mount is provably a bind of
	// it.
	rel := strings.TrimPrefix(strings.TrimPrefix(filepath.Dir(volPath), c.layout.Root()), "/")
	rel = strings.TrimPrefix(rel, "pods/"+podUID+"/")
	vols, err := pod.OpenDir(rel, fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	defer vols.Close()
	// O_PATH: the volume may be a mount (a Memory volume's tmpfs, or
	// something foreign), and nothing is asked of it; friend.BindWithin needs
	// only statx and the descriptor's name.
	vfd, err := fsat.Openat(vols.Fd(), vol, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	switch err {
	case nil:
		t.vol = fsat.FromFd(vfd, volPath)
	case unix.ENOENT, unix.ELOOP, unix.ENOTDIR:
	default:
		return nil, &os.PathError{Op: "openat", Path: volPath, Err: err}
	}
	return t, nil
}

func (t *tree) close() {
	for _, d := range []*fsat.Dir{t.vol, t.sub, t.parent, t.root} {
		d.Close()
	}
}

// report is what an examination found. Its size is bounded by the mount
// table, not by what an attacker writes: entries that are not mount
// points are kept only when the caller lists them (collect), and failures
// go to an errlist.List (the errlist.Max with the smallest paths kept, the
// rest counted).
type report struct {
	collect bool
	budget  *volume.EntryBudget // what the listing may still read; nil: no bound
	stop    error               // the budget stopped the listing here
	entries []entry
	foreign []mountdetect.Mount // every mount that is not an own bind
	errs    errlist.List        // what could not be examined
}

func (r *report) fail(err error) { r.errs.Add(err) }

// failures is every failure kept, then a *mountdetect.MoreErrorsError
// counting those that were not.
func (r *report) failures() []error {
	kept, more := r.errs.Errors()
	if more == 0 {
		return kept
	}
	return append(kept, &mountdetect.MoreErrorsError{N: more})
}

// listed is the entries found, for listing.
func (r *report) listed() []Entry {
	out := make([]Entry, len(r.entries))
	for i, e := range r.entries {
		out[i] = e.Entry
	}
	return out
}

type entry struct {
	Entry
	mnt fsat.MountStat // an own bind's mount identity
}

// refusal is the error Check and Clean refuse with, nil when there is
// nothing foreign and everything could be examined.
func (t *tree) refusal(r *report) error {
	if len(r.foreign) == 0 && r.errs.Len() == 0 {
		return nil
	}
	// A mount can be found twice (by path and through a bind of its
	// parent, or once per propagated copy named alike): list it once.
	ms := slices.Clone(r.foreign)
	slices.SortStableFunc(ms, func(a, b mountdetect.Mount) int { return strings.Compare(a.MountPoint, b.MountPoint) })
	return &RefusedError{Dir: t.dir, Mounts: slices.Compact(ms), Errs: r.failures()}
}

// examineAll is Examine for an open tree, reading at most what b allows
// (nil: everything).
func (t *tree) examineAll(tab *mountdetect.MountTable, b *volume.EntryBudget) ([]Entry, error, error) {
	if t.sub == nil && !t.mountedOn {
		return nil, nil, nil
	}
	r, err := t.examineIn(tab, true, b)
	if err != nil {
		return nil, nil, err
	}
	return r.listed(), t.refusal(r), nil
}

// examine looks at every entry and mount of the tree and changes nothing.
func (t *tree) examine() (*report, error) { return t.examineIn(nil, false, nil) }

// examineIn is examine answered from tab (nil: read the table now); with
// collect, every entry is kept for listing. It reads at most what b
// allows (nil: everything), and past it returns an error matching
// volume.ErrTooManyEntries: the mounts beneath the entries it did not
// read were not told apart, so nothing is concluded.
func (t *tree) examineIn(tab *mountdetect.MountTable, collect bool, b *volume.EntryBudget) (*report, error) {
	r := &report{collect: collect, budget: b}
	if t.mountedOn {
		r.foreign = append(r.foreign, mountdetect.Mount{MountPoint: t.dir})
		return r, nil
	}
	if t.sub == nil {
		return r, nil
	}
	if s, err := fsat.StatMount(t.sub.Fd(), "", fsat.MountKey); err != nil || s.Root {
		if err != nil {
			return nil, &os.PathError{Op: "statx", Path: t.dir, Err: err}
		}
		r.foreign = append(r.foreign, mountdetect.Mount{MountPoint: t.dir})
		return r, nil
	}
	tab, err := tab.OrRead()
	if err != nil {
		return nil, err
	}
	if testHookAfterMountTable != nil {
		testHookAfterMountTable()
	}
	at, beneath, err := tab.MountsAtFile(t.sub.Fd(), t.dir)
	if err != nil {
		return nil, err
	}
	r.foreign = append(r.foreign, at...)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(t.sub.Fd()))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{} // mount points (the kernel's names) accounted for
	read := 0
	err = t.sub.EachEntry(func(ctr fsat.Entry) error {
		if r.stop = b.Take(read); r.stop != nil {
			r.stop = &os.PathError{Op: "readdir", Path: t.dir, Err: r.stop}
			return fsat.ErrStop
		}
		read++
		if ctr.Type != fs.ModeDir {
			return nil // a symlink or file: Clean unlinks it
		}
		cdir, err := t.sub.OpenDir(ctr.Name, fsat.SameMount)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil // changed since listed: Clean looks again
		}
		if errors.Is(err, fsat.ErrOtherMount) {
			// A mount on the container directory: foreign, with all it
			// holds, and never opened.
			r.foreign = append(r.foreign, mountdetect.Mount{MountPoint: t.sub.Join(ctr.Name)})
			seen[real+"/"+ctr.Name] = true
			return nil
		}
		if err != nil {
			r.fail(err)
			return nil
		}
		t.examineContainer(r, tab, cdir, ctr.Name, real+"/"+ctr.Name, seen)
		cdir.Close()
		if r.stop != nil {
			return fsat.ErrStop
		}
		return nil
	})
	if err != nil {
		r.fail(err)
	}
	if r.stop != nil {
		return nil, fmt.Errorf("%w; the subPath tree was not examined past it", r.stop)
	}
	for _, m := range beneath {
		if !seen[m.MountPoint] {
			r.foreign = append(r.foreign, m)
		}
	}
	slices.SortFunc(r.entries, func(a, b entry) int { return compareEntries(a.Entry, b.Entry) })
	return r, nil
}

func (t *tree) examineContainer(r *report, tab *mountdetect.MountTable, cdir *fsat.Dir, ctr, real string, seen map[string]bool) {
	if s, err := fsat.StatMount(cdir.Fd(), "", fsat.MountKey); err != nil || s.Root {
		if err != nil {
			r.fail(&os.PathError{Op: "statx", Path: cdir.Path(), Err: err})
			return
		}
		// A mount on the container directory: foreign, with all it holds.
		r.foreign = append(r.foreign, mountdetect.Mount{MountPoint: cdir.Path()})
		seen[real] = true
		return
	}
	read := 0
	err := cdir.EachEntry(func(idx fsat.Entry) error {
		if r.stop = r.budget.Take(read); r.stop != nil {
			r.stop = &os.PathError{Op: "readdir", Path: cdir.Path(), Err: r.stop}
			return fsat.ErrStop
		}
		read++
		p := cdir.Join(idx.Name)
		s, err := fsat.StatMount(cdir.Fd(), idx.Name, fsat.MountKey)
		mounted := s.Root
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			// An entry whose mount status is unknown is never "not mounted".
			r.fail(&os.PathError{Op: "statx", Path: p, Err: err})
			return nil
		}
		e := entry{Entry: Entry{Container: ctr, Index: idx.Name, Path: p, MountPoint: mounted}}
		if !mounted && idx.Type == fs.ModeDir {
			// rmdir would fail on it after other entries were unmounted:
			// refuse up front instead.
			if err := emptyDir(cdir, idx.Name); err != nil {
				r.fail(err)
			}
		}
		if mounted {
			e.Own, err = t.ownBind(r, tab, cdir, idx.Name, real+"/"+idx.Name, seen)
			if err != nil {
				r.fail(err)
				return nil
			}
			e.mnt = s
		}
		if mounted || r.collect {
			r.entries = append(r.entries, e)
		}
		return nil
	})
	if err != nil {
		r.fail(err)
	}
}

// emptyDir returns an error unless the directory name in cdir is empty
// (the kubelet's <index> mount points are; anything written there is not
// removed by a cleanup that only unmounts and rmdirs).
func emptyDir(cdir *fsat.Dir, name string) error {
	d, err := cdir.OpenDir(name, fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	empty := true
	if err := d.EachEntry(func(fsat.Entry) error { empty = false; return fsat.ErrStop }); err != nil {
		return err
	}
	if !empty {
		return &os.PathError{Op: "rmdir", Path: d.Path(), Err: fmt.Errorf("%w: not a mount point and not empty; a subpath cleanup never removes what is inside", unix.ENOTEMPTY)}
	}
	return nil
}

// ownBind decides whether the mount on the entry name of cdir (whose
// kernel path is real) is one of the volume's own subPath binds, adding
// the mounts that make it foreign to r.
func (t *tree) ownBind(r *report, tab *mountdetect.MountTable, cdir *fsat.Dir, name, real string, seen map[string]bool) (bool, error) {
	p := cdir.Join(name)
	fd, err := fsat.Openat(cdir.Fd(), name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, &os.PathError{Op: "openat", Path: p, Err: err}
	}
	defer unix.Close(fd)
	at, beneath, err := tab.MountsAtFile(fd, p)
	if err != nil {
		return false, err
	}
	for _, m := range append(at, beneath...) {
		seen[m.MountPoint] = true
	}
	seen[real] = true
	switch {
	case len(at) == 0:
		r.foreign = append(r.foreign, mountdetect.Mount{MountPoint: p})
		return false, nil // mounted since the table was read
	case len(at) > 1:
		r.foreign = append(r.foreign, named(at, real, p)...)
		return false, nil // stacked: the top one is unmounted first, and it is not provably the volume's
	case len(beneath) > 0:
		r.foreign = append(r.foreign, beneath...)
		return false, nil
	}
	own := false
	if t.vol != nil {
		if own, err = friend.BindWithin(tab, fd, p, t.vol.Fd(), t.volPath); err != nil {
			return false, err
		}
	}
	if !own {
		r.foreign = append(r.foreign, named(at, real, p)...)
	}
	return own, nil
}

// named gives mounts whose mount point is real the display path p.
func named(ms []mountdetect.Mount, real, p string) []mountdetect.Mount {
	out := slices.Clone(ms)
	for i := range out {
		if out[i].MountPoint == real {
			out[i].MountPoint = p
		}
	}
	return out
}

func (t *tree) check() error {
	r, err := t.examine()
	if err != nil {
		return err
	}
	return t.refusal(r)
}

func (t *tree) list() ([]Entry, error) {
	if t.sub == nil && !t.mountedOn {
		return nil, nil
	}
	r, err := t.examineIn(nil, true, nil)
	if err != nil {
		return nil, err
	}
	return r.listed(), errors.Join(r.failures()...)
}

func (t *tree) clean(ctx context.Context) error {
	if t.isLink {
		// A symlink or file where the directory belongs: unlink it.
		if err := fsat.Retry(func() error { return unix.Unlinkat(t.parent.Fd(), t.name, 0) }); err != nil && err != unix.ENOENT {
			return &os.PathError{Op: "unlinkat", Path: t.dir, Err: err}
		}
		return nil
	}
	r, err := t.examine()
	if err != nil {
		return err
	}
	if err := t.refusal(r); err != nil {
		return err
	}
	if testHookBeforeAct != nil {
		testHookBeforeAct()
	}
	own := map[string]fsat.MountStat{}
	for _, e := range r.entries {
		if e.MountPoint && e.Own {
			own[e.Container+"/"+e.Index] = e.mnt
		}
	}
	logger := logr.FromContextOrDiscard(ctx)
	left := &report{} // failures, capped like the examination's
	err = t.sub.EachEntry(func(ctr fsat.Entry) error {
		t.cleanEntry(logger, ctr, own, left)
		return nil
	})
	if err != nil {
		left.fail(err)
	}
	if left.errs.Len() > 0 {
		return fmt.Errorf("%w under %s: %w", ErrLeft, t.dir, errors.Join(left.failures()...))
	}
	if err := unlinkat(t.parent.Fd(), t.name, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "rmdir", Path: t.dir, Err: err}
	}
	return nil
}

// cleanEntry cleans one <container> entry of the volume's subpath
// directory: a non-directory is unlinked; a directory is opened on the
// same mount (a mount on it is reported, never entered), its own binds
// unmounted and its entries removed (cleanContainer), then it is removed
// with rmdir. Failures go to left.
func (t *tree) cleanEntry(logger logr.Logger, ctr fsat.Entry, own map[string]fsat.MountStat, left *report) {
	cpath := t.sub.Join(ctr.Name)
	if ctr.Type != fs.ModeDir {
		if err := unlinkat(t.sub.Fd(), ctr.Name, 0); err != nil {
			left.fail(&os.PathError{Op: "unlinkat", Path: cpath, Err: err})
		}
		return
	}
	cdir, err := t.sub.OpenDir(ctr.Name, fsat.SameMount)
	if errors.Is(err, fsat.ErrOtherMount) {
		left.fail(&mountdetect.CrossesMountError{Path: t.dir, Mounts: []mountdetect.Mount{{MountPoint: cpath}}, DuringWalk: true})
		return
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		if err := unlinkat(t.sub.Fd(), ctr.Name, 0); err != nil {
			left.fail(&os.PathError{Op: "unlinkat", Path: cpath, Err: err})
		}
		return
	}
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		left.fail(err)
		return
	}
	defer cdir.Close()
	// Ask the open directory itself: a mount that appeared on it since
	// the examination is never entered.
	if s, err := fsat.StatMount(cdir.Fd(), "", fsat.MountKey); err != nil || s.Root {
		if err != nil {
			left.fail(&os.PathError{Op: "statx", Path: cpath, Err: err})
		} else {
			left.fail(&mountdetect.CrossesMountError{Path: t.dir, Mounts: []mountdetect.Mount{{MountPoint: cpath}}, DuringWalk: true})
		}
		return
	}
	cleanContainer(logger, cdir, ctr.Name, own, t.dir, left)
	if err := unlinkat(t.sub.Fd(), ctr.Name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOTEMPTY {
		left.fail(&os.PathError{Op: "rmdir", Path: cpath, Err: err})
	}
}

// unlinkat is unlinkat(2) where a missing entry is success.
func unlinkat(dirfd int, name string, flags int) error {
	err := fsat.Retry(func() error { return unix.Unlinkat(dirfd, name, flags) })
	if err == unix.ENOENT {
		return nil
	}
	return err
}

// cleanContainer unmounts the own binds among cdir's entries (own maps
// "<container>/<index>" to the mount examined) and removes the entries;
// failures go to left.
func cleanContainer(logger logr.Logger, cdir *fsat.Dir, ctr string, own map[string]fsat.MountStat, dir string, left *report) {
	err := cdir.EachEntry(func(idx fsat.Entry) error {
		p := cdir.Join(idx.Name)
		s, err := fsat.StatMount(cdir.Fd(), idx.Name, fsat.MountKey)
		if err == unix.ENOENT {
			return nil
		}
		if err != nil {
			left.fail(&os.PathError{Op: "statx", Path: p, Err: err})
			return nil
		}
		if s.Root {
			if want, ok := own[ctr+"/"+idx.Name]; !ok || !want.SameMount(s) {
				// Not the mount examined: it appeared or was swapped since.
				left.fail(&mountdetect.CrossesMountError{Path: dir, Mounts: []mountdetect.Mount{{MountPoint: p}}, DuringWalk: true})
				return nil
			}
			// Through the directory's descriptor, not following a symlink
			// swapped in for the entry.
			if err := unix.Unmount(cdir.ProcPath(idx.Name), unix.UMOUNT_NOFOLLOW); err != nil {
				left.fail(&os.PathError{Op: "umount", Path: p, Err: err})
				return nil
			}
			logger.V(2).Info("Unmounted subpath", "path", p)
			if s, err = fsat.StatMount(cdir.Fd(), idx.Name, fsat.MountKey); err != nil || s.Root {
				if err == nil {
					err = errors.New("still a mount point after unmount (a mount was stacked on it or swapped in)")
				}
				left.fail(&os.PathError{Op: "umount", Path: p, Err: err})
				return nil
			}
		}
		op, flags := "unlink", 0
		if s.Mode == unix.S_IFDIR {
			op, flags = "rmdir", unix.AT_REMOVEDIR // rmdir only: a non-empty directory stays
		}
		if err := unlinkat(cdir.Fd(), idx.Name, flags); err != nil {
			left.fail(&os.PathError{Op: op, Path: p, Err: err})
		}
		return nil
	})
	if err != nil {
		left.fail(err)
	}
}

// compareEntries orders by container, then by index as a number when both
// are numbers ("2" before "10").
func compareEntries(a, b Entry) int {
	if c := strings.Compare(a.Container, b.Container); c != 0 {
		return c
	}
	ai, aerr := strconv.Atoi(a.Index)
	bi, berr := strconv.Atoi(b.Index)
	if aerr == nil && berr == nil {
		return cmp.Compare(ai, bi)
	}
	return strings.Compare(a.Index, b.Index)
}
