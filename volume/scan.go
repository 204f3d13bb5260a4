package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// lexical order, with unescaped plugin names. It only reads directories;
// it never follows a symlink below the pods directory (a symlink where a
// directory belongs is a problem). A missing pods directory is an error
// matching os.ErrNotExist.
func (l Layout) ScanVolumes() (ScanResult, error) {
	var res ScanResult
	if l.root == "" {
		return res, fmt.Errorf("%w: zero Layout", ErrInvalidRoot)
	}
	pods, err := os.ReadDir(l.PodsDir())
	if err != nil {
		return res, err
	}
	problem := func(p string, err error) { res.Problems = append(res.Problems, ScanProblem{Path: p, Err: err}) }
	for _, pod := range pods {
		podPath := filepath.Join(l.PodsDir(), pod.Name())
		if !pod.IsDir() {
			problem(podPath, fmt.Errorf("not a directory (%s)", describeType(pod.Type())))
			continue
		}
		if err := ValidatePodUID(pod.Name()); err != nil {
			problem(podPath, err)
			continue
		}
		volsPath := filepath.Join(podPath, volumesDirName)
		plugins, err := readSubdirs(volsPath)
		if errors.Is(err, os.ErrNotExist) {
			res.Leftovers = append(res.Leftovers, podPath)
			continue
		}
		if err != nil {
			problem(volsPath, err)
			continue
		}
		found, problemsBefore := 0, len(res.Problems)
		for _, pl := range plugins {
			plPath := filepath.Join(volsPath, pl.Name())
			if !pl.IsDir() {
				problem(plPath, fmt.Errorf("not a directory (%s)", describeType(pl.Type())))
				continue
			}
			plugin, err := UnescapePluginName(pl.Name())
			if err != nil {
				problem(plPath, err)
				continue
			}
			vols, err := readSubdirs(plPath)
			if err != nil {
				problem(plPath, err)
				continue
			}
			for _, v := range vols {
				vPath := filepath.Join(plPath, v.Name())
				if err := ValidateVolumeDirName(v.Name()); err != nil {
					problem(vPath, err)
					continue
				}
				// A file or symlink here is still reported as a volume:
				// teardown must deal with it (RemoveAll unlinks it).
				res.Volumes = append(res.Volumes, VolumeDir{Path: vPath, VolumePath: VolumePath{PodUID: pod.Name(), Plugin: plugin, Volume: v.Name()}})
				found++
			}
		}
		if found == 0 && len(res.Problems) == problemsBefore {
			res.Leftovers = append(res.Leftovers, podPath)
		}
	}
	return res, nil
}

func readSubdirs(dir string) ([]os.DirEntry, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (%s)", dir, describeType(fi.Mode().Type()))
	}
	return os.ReadDir(dir)
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
