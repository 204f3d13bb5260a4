package driver

import (
	"fmt"
	"path/filepath"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/volume"
)

// csiPlugin is the kubelet's CSI volume plugin, whose directory holds every
// CSI volume of a pod: <root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>.
const csiPlugin = "kubernetes.io/csi"

// targetName is the last element of the target path the kubelet gives a
// node plugin: <volume>/mount. The kubelet makes <volume> (and writes its
// vol_data.json there); the driver makes mount and removes it.
const targetName = "mount"

// metaPrefix starts the name of a volume's metadata directory in the pod's
// plugins/kubernetes.io~empty-dir: "csi_" and the volume's name. The "_"
// makes it a name no pod volume can have, so it is never an ordinary
// emptyDir's, and "csi_" is never "wrapped_", the kubelet's wrapped
// volumes' prefix.
const metaPrefix = "csi_"

// target is a parsed target path: the pod and its volume.
type target struct {
	path   string
	podUID string
	volume string // the volume directory's name in volumes/kubernetes.io~csi
}

// location is where the emptydir plugin keeps the volume.
func (t target) location() emptydir.Location {
	// Every volume of this driver is recorded by its publish before
	// anything is in it: a target without a record is not ours
	// (another driver's, a misrouted call), and only an empty one goes.
	// The driver runs in a container: restarted, it is in a new mount
	// namespace, where the tmpfs its predecessor made has other mount
	// IDs (AnyMountNamespace).
	return emptydir.Location{Plugin: csiPlugin, Dir: t.volume, Sub: targetName, Meta: metaPrefix + t.volume,
		RecordRequired: true, AnyMountNamespace: true}
}

// parseTarget checks that path is exactly the kubelet's target path for an
// inline CSI volume under the layout's root, <root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount,
// as text: absolute, clean, no "." or ".." element, every element a valid
// name (the volume directory's part parsed as the layout parses any
// volume directory). Nothing is looked at on disk here; the emptydir
// plugin reaches the directories by descriptors from the root, never
// following a symlink below it.
func parseTarget(l volume.Layout, path string) (target, error) {
	if !filepath.IsAbs(path) {
		return target{}, fmt.Errorf("target path %q is not absolute", path)
	}
	if filepath.Clean(path) != path {
		return target{}, fmt.Errorf("target path %q is not clean (a trailing /, //, . or .. element)", path)
	}
	escaped, err := volume.EscapePluginName(csiPlugin)
	if err != nil {
		return target{}, err
	}
	want := filepath.Join(l.Root(), "pods", "<pod UID>", "volumes", escaped, "<volume>", targetName)
	if filepath.Base(path) != targetName {
		return target{}, fmt.Errorf("target path %q is not the kubelet's target path of an inline CSI volume (want %s)", path, want)
	}
	vp, err := l.ParseVolumePath(filepath.Dir(path))
	if err != nil {
		return target{}, fmt.Errorf("target path %q is not the kubelet's target path of an inline CSI volume (want %s): %w", path, want, err)
	}
	if vp.Plugin != csiPlugin {
		return target{}, fmt.Errorf("target path %q is in the volume directory of %s, not of %s (want %s)", path, vp.Plugin, csiPlugin, want)
	}
	// An inline volume's directory is named after the pod's volume: a
	// DNS label.
	if err := volume.ValidateVolumeName(vp.Volume); err != nil {
		return target{}, fmt.Errorf("target path %q: %w", path, err)
	}
	return target{path: path, podUID: vp.PodUID, volume: vp.Volume}, nil
}
