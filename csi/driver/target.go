package driver

import (
	"fmt"
	"path/filepath"
	"strings"

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
// inline CSI volume under root, <root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount,
// as text: absolute, clean, no "." or ".." element, every element a valid
// name. Nothing is looked at on disk here; the emptydir plugin reaches the
// directories by descriptors from root, never following a symlink below it.
func parseTarget(root, path string) (target, error) {
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
	want := filepath.Join(root, "pods", "<pod UID>", "volumes", escaped, "<volume>", targetName)
	rest, ok := strings.CutPrefix(path, filepath.Join(root, "pods")+"/")
	if !ok {
		return target{}, fmt.Errorf("target path %q is not under the kubelet root's pods directory (want %s)", path, want)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[1] != "volumes" || parts[2] != escaped || parts[4] != targetName {
		return target{}, fmt.Errorf("target path %q is not the kubelet's target path of an inline CSI volume (want %s)", path, want)
	}
	if err := volume.ValidatePodUID(parts[0]); err != nil {
		return target{}, fmt.Errorf("target path %q: %w", path, err)
	}
	// An inline volume's directory is named after the pod's volume: a
	// DNS label.
	if err := volume.ValidateVolumeName(parts[3]); err != nil {
		return target{}, fmt.Errorf("target path %q: %w", path, err)
	}
	return target{path: path, podUID: parts[0], volume: parts[3]}, nil
}
