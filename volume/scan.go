package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/nodevol/nodevol/internal/fsat"
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
}

// ErrTooManyEntries is matched by the problem ScanVolumes reports when it
// stopped reading at the bound MaxScanEntries set.
var ErrTooManyEntries = errors.New("too many entries")

// ScanOption configures ScanVolumes.
type ScanOption interface{ applyScan(*scanConfig) }

type scanConfig struct{ maxEntries int }

type maxScanEntries int

func (n maxScanEntries) applyScan(c *scanConfig) { c.maxEntries = int(n) }

// MaxScanEntries bounds the directory entries ScanVolumes reads, all
// directories together, at n (n <= 0: no bound). Whoever can write into a
// pod directory can make any number of entries there, and every one
// costs memory in the result; at the bound the listing stops, and the
// directory it stopped in is a problem matching ErrTooManyEntries (the
// result is then incomplete, and says so). An agent that must not grow
// without bound sets it; reconstruction, which must see every volume,
// does not.
func MaxScanEntries(n int) ScanOption { return maxScanEntries(n) }

// ScanVolumes lists every volume directory <root>/pods/*/volumes/*/*, in
// lexical order, with unescaped plugin names. It only reads directories,
// and reaches each one by a descriptor opened relative to its parent
// without following symlinks (the root itself may be a symlink): a
// symlinked pods directory is an error matching fsat's symlink error and
// syscall.ELOOP, and a symlink where a directory belongs further down is
// a problem. A missing pods directory is an error matching os.ErrNotExist.
// Linux only (elsewhere an error matching errors.ErrUnsupported).
func (l Layout) ScanVolumes(opts ...ScanOption) (ScanResult, error) {
	var res ScanResult
	var cfg scanConfig
	for _, o := range opts {
		o.applyScan(&cfg)
	}
	b := &entryBudget{left: cfg.maxEntries, bounded: cfg.maxEntries > 0}
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
	pods, err := b.read(podsDir)
	if err != nil && !errors.Is(err, ErrTooManyEntries) {
		return res, err
	}
	if err != nil {
		res.Problems = append(res.Problems, ScanProblem{Path: podsDir.Path(), Err: err})
	}
	problem := func(p string, err error) { res.Problems = append(res.Problems, ScanProblem{Path: p, Err: err}) }
	for _, pod := range pods {
		podPath := podsDir.Join(pod.Name)
		if pod.Type != fs.ModeDir {
			problem(podPath, fmt.Errorf("not a directory (%s)", describeType(pod.Type)))
			continue
		}
		if err := ValidatePodUID(pod.Name); err != nil {
			problem(podPath, err)
			continue
		}
		if b.exhausted {
			break
		}
		found, problemsBefore := scanPod(podsDir, pod.Name, &res, b)
		if found == 0 && len(res.Problems) == problemsBefore {
			res.Leftovers = append(res.Leftovers, podPath)
		}
	}
	return res, nil
}

// scanPod adds the volume directories of the pod directory uid in pods to
// res, and its problems; it returns how many volumes it found and how many
// problems res held before.
func scanPod(pods *fsat.Dir, uid string, res *ScanResult, b *entryBudget) (found, problemsBefore int) {
	problemsBefore = len(res.Problems)
	problem := func(p string, err error) { res.Problems = append(res.Problems, ScanProblem{Path: p, Err: err}) }
	vols, err := pods.OpenDir(uid+"/"+volumesDirName, fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, problemsBefore
	}
	if err != nil {
		problem(pods.Join(uid+"/"+volumesDirName), err)
		return 0, problemsBefore
	}
	defer vols.Close()
	plugins, err := b.read(vols)
	if err != nil {
		problem(vols.Path(), err)
	}
	for _, pl := range plugins {
		if b.exhausted {
			break
		}
		plPath := vols.Join(pl.Name)
		if pl.Type != fs.ModeDir {
			problem(plPath, fmt.Errorf("not a directory (%s)", describeType(pl.Type)))
			continue
		}
		plugin, err := UnescapePluginName(pl.Name)
		if err != nil {
			problem(plPath, err)
			continue
		}
		plDir, err := vols.OpenDir(pl.Name, fsat.SameMount)
		if err != nil {
			problem(plPath, err)
			continue
		}
		entries, err := b.read(plDir)
		plDir.Close()
		if err != nil {
			problem(plPath, err)
		}
		for _, v := range entries {
			vPath := plDir.Join(v.Name)
			if err := ValidateVolumeDirName(v.Name); err != nil {
				problem(vPath, err)
				continue
			}
			// A file or symlink here is still reported as a volume:
			// teardown must deal with it (it unlinks it).
			res.Volumes = append(res.Volumes, VolumeDir{Path: vPath, VolumePath: VolumePath{PodUID: uid, Plugin: plugin, Volume: v.Name}})
			found++
		}
	}
	return found, problemsBefore
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

// entryBudget is how many more directory entries ScanVolumes may read.
type entryBudget struct {
	left      int
	bounded   bool
	exhausted bool // the listing stopped at the bound
}

// read lists d's entries sorted by name, at most as many as are left;
// when it stops at the bound it returns those read so far and an error
// matching ErrTooManyEntries, and no further directory is read.
func (b *entryBudget) read(d *fsat.Dir) ([]fsat.Entry, error) {
	if !b.bounded {
		return d.ReadEntries()
	}
	var out []fsat.Entry
	err := d.EachEntry(func(e fsat.Entry) error {
		if b.left <= 0 {
			b.exhausted = true
			return errTooMany
		}
		b.left--
		out = append(out, e)
		return nil
	})
	slices.SortFunc(out, func(a, b fsat.Entry) int { return strings.Compare(a.Name, b.Name) })
	if err == errTooMany {
		return out, &os.PathError{Op: "readdir", Path: d.Path(), Err: fmt.Errorf("%w: the scan stopped here, at its bound; entries after it were not examined", ErrTooManyEntries)}
	}
	return out, err
}

// errTooMany ends an EachEntry at the bound.
var errTooMany = errors.New("bound reached")
