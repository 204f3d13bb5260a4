package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

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

// ScanVolumes lists every volume directory <root>/pods/*/volumes/*/*, in
// lexical order, with unescaped plugin names. It only reads directories,
// and reaches each one by a descriptor opened relative to its parent
// without following symlinks (the root itself may be a symlink): a
// symlinked pods directory is an error matching fsat's symlink error and
// syscall.ELOOP, and a symlink where a directory belongs further down is
// a problem. A missing pods directory is an error matching os.ErrNotExist.
// Linux only (elsewhere an error matching errors.ErrUnsupported).
func (l Layout) ScanVolumes() (ScanResult, error) {
	var res ScanResult
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
	pods, err := podsDir.ReadEntries()
	if err != nil {
		return res, err
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
		found, problemsBefore := scanPod(podsDir, pod.Name, &res)
		if found == 0 && len(res.Problems) == problemsBefore {
			res.Leftovers = append(res.Leftovers, podPath)
		}
	}
	return res, nil
}

// scanPod adds the volume directories of the pod directory uid in pods to
// res, and its problems; it returns how many volumes it found and how many
// problems res held before.
func scanPod(pods *fsat.Dir, uid string, res *ScanResult) (found, problemsBefore int) {
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
	plugins, err := vols.ReadEntries()
	if err != nil {
		problem(vols.Path(), err)
	}
	for _, pl := range plugins {
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
		entries, err := plDir.ReadEntries()
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
