package reconciler

import (
	"errors"
	"io/fs"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// removePodDir removes the directory of a pod that is gone and has no
// volume left, reached by descriptor from the kubelet root: whoever can
// write into the pods directory or the pod directory may swap any name
// there for a symlink or a mount, so pods/<uid> is opened once, without
// following a symlink, and must be on the pods directory's mount; every
// removal is relative to it. volumes/ goes first, with rmdir only: while
// a volume directory is still there (a plugin this Manager does not
// serve, a volume left alone by reconstruction), the rest of the pod
// directory — plugins/<plugin>/<volume> metadata, volume-subpaths — still
// belongs to it and stays. Everything else goes with
// mountdetect.RemoveAllAt, which never crosses a mount. A pod directory
// that is not there is success.
func removePodDir(l volume.Layout, uid string) error {
	if _, err := l.PodDir(uid); err != nil {
		return err
	}
	root, err := fsat.OpenRoot(l.Root())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	pods, err := root.OpenDir("pods") // the pods directory may be a mount of its own
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer pods.Close()
	pod, err := pods.OpenDir(uid, fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer pod.Close()
	entries, err := pod.ReadEntries()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name == "volumes" && e.Type == fs.ModeDir {
			if err := rmdirVolumes(pod); err != nil {
				return err
			}
		}
	}
	var errs []error
	for _, e := range entries {
		if e.Name == "volumes" && e.Type == fs.ModeDir {
			continue
		}
		errs = append(errs, mountdetect.RemoveAllAt(pod.Fd(), e.Name, pod.Join(e.Name)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// By name, but rmdir only: whatever took the name since (a symlink, a
	// non-empty directory, a mount point) makes it fail, never removed.
	return pods.Rmdir(uid)
}

// rmdirVolumes removes <pod>/volumes/<plugin>/ directories and volumes/
// itself with rmdir only: nothing that is not empty, no mount point, and
// never through a symlink.
func rmdirVolumes(pod *fsat.Dir) error {
	vols, err := pod.OpenDir("volumes", fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer vols.Close()
	plugins, err := vols.ReadEntries()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range plugins {
		errs = append(errs, vols.Rmdir(p.Name))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return pod.Rmdir("volumes")
}
