package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// VolumeDir is a volume directory found on disk.
type VolumeDir struct {
	Path string
	VolumePath
}

// ScanProblem is an entry under the pods directory that does not parse:
// a bad pod UID, plugin directory or volume directory name, or a file where
// a directory belongs. Problems are reported, never skipped silently.
type ScanProblem struct {
	Path string
	Err  error
}

// ScanResult is everything ScanVolumes found.
type ScanResult struct {
	Volumes  []VolumeDir
	Problems []ScanProblem
	// Leftovers are pod directories that hold no volume directory (and
	// nothing that failed to parse).
	Leftovers []string
	// With ScanLimits: Budgets holds what each pod directory listed may
	// still read, by pod UID, for the caller to read the rest of the pod
	// with (subpath.WithinBudget): what the caller reads for a pod then counts
	// against that pod's share.
	Budgets map[string]*EntryBudget
	// OverBudget are the pod directories, in order, where a bound of
	// ScanLimits stopped a listing: entries past it were not examined
	// (their problems say where).
	OverBudget []string
	// Incomplete: a bound stopped a listing, in a pod (OverBudget) or in
	// the pods directory.
	Incomplete bool
	// Pods are the UIDs of every pod directory the pods directory gave,
	// in order (those OnlyPods left out included), and Share the budget
	// each got (ScanLimits.PodShare; -1 without ScanLimits).
	Pods  []string
	Share int
}

// ErrTooManyEntries is matched by the problem ScanVolumes reports where a
// bound of ScanLimits stopped a listing, and by EntryBudget's errors.
var ErrTooManyEntries = errors.New("too many entries")

// ScanOption configures ScanVolumes.
type ScanOption interface{ applyScan(*scanConfig) }

type scanConfig struct {
	limits  ScanLimits
	bounded bool
	only    func(uid string) bool
	visit   func(PluginDir)
	// handOnly: the volumes go to visit only (WithPluginDirOnly).
	handOnly bool
}

// PluginDir is a plugin directory <root>/pods/<uid>/volumes/<plugin> that
// ScanVolumes listed, as WithPluginDir hands it on while the directory is
// still open.
type PluginDir struct {
	// Fd is the directory that was listed (reached as ScanVolumes reaches
	// every directory: relative to its parent, no symlink followed, on the
	// pods directory's mount), listed already: its offset is past its
	// entries. It is ScanVolumes's: valid during the call only, never to
	// be closed or kept.
	Fd int
	// Pod is the pod directory <root>/pods/<uid> that Fd was reached from
	// (through its volumes directory), reached the same way and held by
	// ScanVolumes as Fd is (valid during the call only, never to be closed
	// or kept): what else a caller reads of the pod through it is in the
	// directory whose volumes were listed, whatever was renamed since. A
	// PluginDir made otherwise than by ScanVolumes sets it, or -1; its zero
	// value, left unset, is standard input, which emptydir's PlanListed
	// does not take for a pod directory (it plans by name).
	Pod int
	// Path names it for messages (as listed), and Rel is its path from
	// the pods directory: "<uid>/volumes/<escaped plugin>".
	Path, Rel string
	// Volumes are the volume directories listed in it, as they are in
	// ScanResult.Volumes (the same values, in the same order).
	Volumes []VolumeDir
	// Budget is the pod's (ScanResult.Budgets; nil when the scan is not
	// bounded), for what the caller reads of the pod's volumes.
	Budget *EntryBudget
}

// WithPluginDir makes ScanVolumes call fn with every plugin directory in
// which it lists volume directories, before it closes it, in the order of
// ScanResult.Volumes (every volume is in exactly one call). A caller that
// examines each volume relative to its plugin directory does it through
// the descriptor that was listed: the directory is not opened, nor its
// path resolved, a second time, so the volumes examined are those of the
// directory listed even if it was renamed or replaced meanwhile (their
// paths name it as it was listed). fn runs while ScanVolumes holds the
// root, the pods directory, one pod's directory, its volumes directory
// and the plugin directory open.
func WithPluginDir(fn func(PluginDir)) ScanOption { return withPluginDir(fn) }

type withPluginDir func(PluginDir)

func (o withPluginDir) applyScan(c *scanConfig) { c.visit, c.handOnly = o, false }

// WithPluginDirOnly is WithPluginDir with ScanResult.Volumes left empty:
// each plugin directory's volumes are handed on to fn only, in a slice
// valid during the call (fn keeps what it needs of each). A caller that
// makes something of every volume as it is handed on does not hold every
// volume twice.
func WithPluginDirOnly(fn func(PluginDir)) ScanOption { return withPluginDirOnly(fn) }

type withPluginDirOnly func(PluginDir)

func (o withPluginDirOnly) applyScan(c *scanConfig) { c.visit, c.handOnly = o, true }

// OnlyPods makes ScanVolumes list the pods directory whole (its problems,
// Pods and Share are as without it) but read only the pod directories
// whose UID pick says true: their volumes, problems, leftovers and
// budgets are in the result, and nothing of the others. A caller that
// keeps what it learned of each pod (nodevol serve) re-reads only the
// pods that changed, each within the share a whole scan would give it.
func OnlyPods(pick func(uid string) bool) ScanOption { return onlyPods(pick) }

type onlyPods func(string) bool

func (o onlyPods) applyScan(c *scanConfig) { c.only = o }

// ScanLimits bound what ScanVolumes reads, in directory entries: whoever
// can write into a pod directory can make any number of them there, each
// one costs time to read and memory in the result (and in what the caller
// makes of it), and no pod's entries may use up what protects the others.
// A zero field is no bound of its kind.
//
// The pods directory yields at most PodsDir entries. Every pod directory
// then gets the same budget, whatever the others hold:
//
//	min(Pod, (Node - entries of the pods directory) / pod directories)
//
// (ScanLimits.PodShare), of which one directory yields at most Dir. A pod
// spends only its own budget: the listing of its volumes and plugin
// directories, and what the caller reads with the budget ScanResult hands
// on (its subPath tree, say). So the node as a whole reads at most Node
// entries, however many pods there are and whatever they hold, and a pod
// over its budget hides nothing of the others. Where a bound stops a
// listing, a problem matching ErrTooManyEntries says so, the pod is in
// ScanResult.OverBudget and the result is Incomplete. Reconstruction,
// which must see every volume, sets no limits.
type ScanLimits struct {
	Node    int // entries in all, the pods directory's included
	PodsDir int // entries of the pods directory
	Pod     int // entries for one pod directory, at most
	Dir     int // entries of any one directory below a pod directory
}

// DefaultScanLimits are the limits of "nodevol scan" and "nodevol serve":
// 65,536 entries in all (about 100 MB of scan report at the worst: the
// old node-wide bound, measured), 8,192 pod directories, 4,096 entries a
// pod and 1,024 a directory. A pod's share is 594 entries on a node of
// 110 pods (the kubelet's default maximum), 64 at 1,000; a pod as the
// kubelet lays it out needs one per plugin, one per volume and two per
// subPath mount.
func DefaultScanLimits() ScanLimits {
	return ScanLimits{Node: 1 << 16, PodsDir: 1 << 13, Pod: 1 << 12, Dir: 1 << 10}
}

func (l ScanLimits) applyScan(c *scanConfig) { c.limits, c.bounded = l, true }

// PodShare is the budget of each of pods pod directories once the pods
// directory gave podsRead entries: min(Pod, (Node-podsRead)/pods), 0 for
// none, -1 for no bound.
func (l ScanLimits) PodShare(podsRead, pods int) int {
	share := -1
	if l.Node > 0 {
		share = max(0, l.Node-podsRead) / max(1, pods)
	}
	if l.Pod > 0 && (share < 0 || l.Pod < share) {
		share = l.Pod
	}
	return share
}

// EntryBudget is how many more directory entries a bounded scan may read
// for one pod, and how many it may read from any one directory. A nil
// *EntryBudget is no bound. It is not safe for concurrent use.
type EntryBudget struct {
	share  int // the pod's whole budget; < 0: none
	left   int
	perDir int // <= 0: none
	spent  bool
}

// NewEntryBudget is a budget of entries in all (< 0: no bound) and perDir
// from one directory (<= 0: no bound).
func NewEntryBudget(entries, perDir int) *EntryBudget {
	return &EntryBudget{share: entries, left: entries, perDir: perDir}
}

// Take accounts for reading one more entry of a directory that has given
// read entries already. It returns nil, or an error matching
// ErrTooManyEntries that says which bound stops the listing: the
// directory's, or the pod's, after which the budget is spent and every
// Take fails.
func (b *EntryBudget) Take(read int) error {
	switch {
	case b == nil:
		return nil
	case b.spent || (b.share >= 0 && b.left <= 0):
		b.spent = true
		return fmt.Errorf("%w: the pod's budget of %d entries is spent", ErrTooManyEntries, b.share)
	case b.perDir > 0 && read >= b.perDir:
		return fmt.Errorf("%w: more than %d entries in one directory", ErrTooManyEntries, b.perDir)
	}
	if b.share >= 0 {
		b.left--
	}
	return nil
}

// Spent reports whether the pod's budget ran out (a Take failed for it).
func (b *EntryBudget) Spent() bool { return b != nil && b.spent }

// Used is how many entries were taken.
func (b *EntryBudget) Used() int {
	if b == nil || b.share < 0 {
		return 0
	}
	return b.share - b.left
}

// ScanVolumes lists every volume directory <root>/pods/*/volumes/*/*, in
// lexical order, with unescaped plugin names. It only reads directories,
// and reaches each one by a descriptor opened relative to its parent
// without following symlinks (the root itself may be a symlink): a
// symlinked pods directory is an error matching fsat's symlink error and
// syscall.ELOOP, and a symlink where a directory belongs further down is
// a problem. A missing pods directory is an error matching os.ErrNotExist.
// With ScanLimits it reads no more than they allow (see there). Linux only
// (elsewhere an error matching errors.ErrUnsupported).
func (l Layout) ScanVolumes(opts ...ScanOption) (ScanResult, error) {
	var res ScanResult
	var cfg scanConfig
	for _, o := range opts {
		o.applyScan(&cfg)
	}
	if l.root == "" {
		return res, fmt.Errorf("%w: zero Layout", ErrInvalidRoot)
	}
	root, err := fsat.OpenRoot(l.root)
	if err != nil {
		return res, err
	}
	defer root.Close()
	podsDir, err := root.OpenDir(podsDirName)
	if err != nil {
		return res, err
	}
	defer podsDir.Close()
	problem := func(p string, err error) { res.Problems = append(res.Problems, ScanProblem{Path: p, Err: err}) }
	var podsBudget *EntryBudget
	if cfg.bounded {
		n := cfg.limits.PodsDir
		if n <= 0 || (cfg.limits.Node > 0 && cfg.limits.Node < n) {
			n = cfg.limits.Node
		}
		if n > 0 {
			podsBudget = NewEntryBudget(-1, n)
		}
	}
	pods, err := readDir(podsDir, podsBudget, nil)
	if err != nil && !errors.Is(err, ErrTooManyEntries) {
		return res, err
	}
	if err != nil {
		problem(podsDir.Path(), err)
		res.Incomplete = true
	}
	podDir := func(e fsat.Entry) error {
		if e.Type != fs.ModeDir {
			return fmt.Errorf("not a directory (%s)", describeType(e.Type))
		}
		return ValidatePodUID(e.Name)
	}
	// Every pod gets the same share, fixed before any is read: what one
	// pod holds changes nothing for the others.
	valid := 0
	for _, pod := range pods {
		if podDir(pod) == nil {
			valid++
		}
	}
	share := cfg.limits.PodShare(len(pods), valid)
	if !cfg.bounded {
		share = -1
	}
	res.Share = share
	res.Pods = make([]string, 0, valid)
	if cfg.bounded {
		res.Budgets = make(map[string]*EntryBudget, valid)
	}
	var lists [2][]fsat.Entry
	// The volumes found go to the result, or (handOnly) to one slice
	// reused for every plugin directory.
	var handed []VolumeDir
	found := &res.Volumes
	if cfg.handOnly {
		found = &handed
	}
	for _, pod := range pods {
		podPath := podsDir.Join(pod.Name)
		if err := podDir(pod); err != nil {
			problem(podPath, err)
			continue
		}
		res.Pods = append(res.Pods, pod.Name)
		if cfg.only != nil && !cfg.only(pod.Name) {
			continue
		}
		var b *EntryBudget
		if cfg.bounded {
			b = NewEntryBudget(share, cfg.limits.Dir)
			res.Budgets[pod.Name] = b
		}
		n, problemsBefore, stopped := scanPod(podsDir, pod.Name, &res, found, cfg.handOnly, b, cfg.visit, &lists)
		if stopped {
			res.OverBudget = append(res.OverBudget, podPath)
			res.Incomplete = true
		}
		if n == 0 && len(res.Problems) == problemsBefore {
			res.Leftovers = append(res.Leftovers, podPath)
		}
	}
	return res, nil
}

// scanPod adds the volume directories of the pod directory uid in pods to
// out (with reuse, each plugin directory's replace the last's), and its
// problems to res, reading at most what b allows, and hands each plugin
// directory with volumes to visit (nil: none) before closing it; it
// returns how many volumes it found, how many problems res held before,
// and whether a bound stopped a listing.
//
// lists are two slices whose arrays the pod's listings reuse: one for the
// volumes directory, one for a plugin directory (nothing keeps them).
func scanPod(pods *fsat.Dir, uid string, res *ScanResult, out *[]VolumeDir, reuse bool, b *EntryBudget, visit func(PluginDir), lists *[2][]fsat.Entry) (found, problemsBefore int, stopped bool) {
	problemsBefore = len(res.Problems)
	problem := func(p string, err error) {
		res.Problems = append(res.Problems, ScanProblem{Path: p, Err: err})
		stopped = stopped || errors.Is(err, ErrTooManyEntries)
	}
	// With visit, the pod directory is opened on its own, to be handed on
	// with each plugin directory; without, its volumes directory is
	// reached in one openat2.
	from, rel := pods, uid+"/"+volumesDirName
	podFd := -1
	if visit != nil {
		pod, err := pods.OpenDir(uid, fsat.SameMount)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, problemsBefore, false
		}
		if err != nil {
			problem(pods.Join(uid), err)
			return 0, problemsBefore, false
		}
		defer pod.Close()
		from, rel, podFd = pod, volumesDirName, pod.Fd()
	}
	vols, err := from.OpenDir(rel, fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, problemsBefore, false
	}
	if err != nil {
		problem(from.Join(rel), err)
		return 0, problemsBefore, false
	}
	defer vols.Close()
	plugins, err := readDir(vols, b, lists[0])
	lists[0] = plugins
	if err != nil {
		problem(vols.Path(), err)
	}
	for _, pl := range plugins {
		if pl.Type != fs.ModeDir {
			problem(vols.Join(pl.Name), fmt.Errorf("not a directory (%s)", describeType(pl.Type)))
			continue
		}
		plugin, err := UnescapePluginName(pl.Name)
		if err != nil {
			problem(vols.Join(pl.Name), err)
			continue
		}
		if b.Spent() {
			break // said once, where it ran out
		}
		plDir, err := vols.OpenDir(pl.Name, fsat.SameMount)
		if err != nil {
			problem(vols.Join(pl.Name), err)
			continue
		}
		plPath := plDir.Path() // vols.Join(pl.Name), made once
		entries, err := readDir(plDir, b, lists[1])
		lists[1] = entries
		if err != nil {
			problem(plPath, err)
		}
		if reuse {
			*out = (*out)[:0]
		}
		first := len(*out)
		*out = growDoubling(*out, len(entries))
		for _, v := range entries {
			vPath := plDir.Join(v.Name)
			if err := ValidateVolumeDirName(v.Name); err != nil {
				problem(vPath, err)
				continue
			}
			// A file or symlink here is still reported as a volume:
			// teardown must deal with it (it unlinks it).
			*out = append(*out, VolumeDir{Path: vPath, VolumePath: VolumePath{PodUID: uid, Plugin: plugin, Volume: v.Name}})
			found++
		}
		if visit != nil && len(*out) > first {
			// Rel is the end of plPath, which the pods directory's path
			// and a slash begin.
			rel := plPath[len(pods.Path())+1:]
			visit(PluginDir{Fd: plDir.Fd(), Pod: podFd, Path: plPath, Rel: rel, Volumes: (*out)[first:len(*out):len(*out)], Budget: b})
		}
		plDir.Close()
	}
	return found, problemsBefore, stopped
}

// growDoubling is s with room for n more elements, its capacity at least
// doubled when it has to grow: append grows a large slice by a quarter,
// which allocates about five times the final size over a scan of ten
// thousand volumes; doubling allocates about twice.
func growDoubling[E any](s []E, n int) []E {
	if cap(s)-len(s) >= n {
		return s
	}
	return slices.Grow(s, max(n, len(s)))
}

// describeType names a file type for messages.
func describeType(t os.FileMode) string {
	switch {
	case t == 0:
		return "a regular file"
	case t&os.ModeSymlink != 0:
		return "a symlink"
	case t&os.ModeNamedPipe != 0:
		return "a named pipe"
	case t&os.ModeSocket != 0:
		return "a socket"
	case t&os.ModeDevice != 0:
		return "a device"
	}
	return t.String()
}

// readDir lists d's entries sorted by name, at most as many as b allows
// (nil: all), in buf's array when it is large enough. When a bound stops
// it, it returns those read so far and an error matching
// ErrTooManyEntries.
func readDir(d *fsat.Dir, b *EntryBudget, buf []fsat.Entry) ([]fsat.Entry, error) {
	if b == nil {
		return d.ReadEntries()
	}
	out := buf[:0]
	var stop error
	err := d.EachEntry(func(e fsat.Entry) error {
		if stop = b.Take(len(out)); stop != nil {
			return fsat.ErrStop
		}
		out = append(out, e)
		return nil
	})
	slices.SortFunc(out, func(a, b fsat.Entry) int { return strings.Compare(a.Name, b.Name) })
	if err == nil && stop != nil {
		err = &os.PathError{Op: "readdir", Path: d.Path(), Err: fmt.Errorf("%w; the scan stopped here, and entries after it were not examined", stop)}
	}
	return out, err
}
