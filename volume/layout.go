package volume

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultRoot is the kubelet's default root directory.
const DefaultRoot = "/var/lib/kubelet"

// Directory names inside a pod directory, as the kubelet names them.
const (
	podsDirName           = "pods"
	volumesDirName        = "volumes"
	pluginsDirName        = "plugins"
	volumeSubpathsDirName = "volume-subpaths"
)

// ErrNotVolumePath is matched by errors from ParseVolumePath for paths that
// do not have the shape <root>/pods/<uid>/volumes/<plugin>/<volume>.
var ErrNotVolumePath = errors.New("not a pod volume path")

// ErrInvalidRoot is matched by errors from NewLayout.
var ErrInvalidRoot = errors.New("invalid kubelet root")

// Layout builds the kubelet's on-disk paths under one root directory:
//
//	<root>/pods/<podUID>/volumes/<escaped-plugin>/<volume>     the volume directory
//	<root>/pods/<podUID>/plugins/<escaped-plugin>/<volume>/    per-volume plugin metadata
//	<root>/pods/<podUID>/volume-subpaths/<volume>/<container>/<index>
//
// Every component is validated before it is joined, so no method can
// return a path outside the root. The zero Layout is not usable; build one
// with NewLayout.
type Layout struct {
	root string
}

// NewLayout checks root (absolute, clean, not "/") and returns its layout.
func NewLayout(root string) (Layout, error) {
	bad := func(reason string) error { return fmt.Errorf("%w %q: %s", ErrInvalidRoot, root, reason) }
	switch {
	case root == "":
		return Layout{}, bad("empty")
	case strings.IndexByte(root, 0) >= 0:
		return Layout{}, bad("contains a NUL byte")
	case !filepath.IsAbs(root):
		return Layout{}, bad("not absolute")
	case unclean(root) != "":
		return Layout{}, bad(fmt.Sprintf("not clean: %s (use %q)", unclean(root), filepath.Clean(root)))
	case root == "/":
		return Layout{}, bad("the filesystem root cannot be a kubelet root")
	}
	return Layout{root: root}, nil
}

// Root is the kubelet root directory.
func (l Layout) Root() string { return l.root }

// PodsDir is <root>/pods.
func (l Layout) PodsDir() string { return filepath.Join(l.root, podsDirName) }

// PodDir is <root>/pods/<uid>.
func (l Layout) PodDir(uid string) (string, error) {
	if l.root == "" {
		return "", fmt.Errorf("%w: zero Layout", ErrInvalidRoot)
	}
	if err := ValidatePodUID(uid); err != nil {
		return "", err
	}
	// The root is clean and not "/", uid one valid element: this is
	// filepath.Join's answer, without its Clean (paths are built for
	// every volume a scan examines).
	return l.root + "/" + podsDirName + "/" + uid, nil
}

// PodVolumesDir is <root>/pods/<uid>/volumes.
func (l Layout) PodVolumesDir(uid string) (string, error) {
	return l.podSubdir(uid, volumesDirName)
}

// PodVolumeSubpathsDir is <root>/pods/<uid>/volume-subpaths.
func (l Layout) PodVolumeSubpathsDir(uid string) (string, error) {
	return l.podSubdir(uid, volumeSubpathsDirName)
}

func (l Layout) podSubdir(uid, sub string) (string, error) {
	pod, err := l.PodDir(uid)
	if err != nil {
		return "", err
	}
	return pod + "/" + sub, nil // sub is one of the names above
}

// VolumeDir is <root>/pods/<uid>/volumes/<escaped-plugin>/<volume>.
func (l Layout) VolumeDir(uid, plugin, volume string) (string, error) {
	return l.pluginVolume(uid, volumesDirName, plugin, volume)
}

// PluginVolumeDir is <root>/pods/<uid>/plugins/<escaped-plugin>/<volume>,
// where plugins keep per-volume metadata such as the "ready" marker.
func (l Layout) PluginVolumeDir(uid, plugin, volume string) (string, error) {
	return l.pluginVolume(uid, pluginsDirName, plugin, volume)
}

func (l Layout) pluginVolume(uid, kind, plugin, volume string) (string, error) {
	base, err := l.podSubdir(uid, kind)
	if err != nil {
		return "", err
	}
	escaped, err := EscapePluginName(plugin)
	if err != nil {
		return "", err
	}
	if err := ValidateVolumeDirName(volume); err != nil {
		return "", err
	}
	return base + "/" + escaped + "/" + volume, nil // validated elements, as PodDir
}

// VolumeSubpathsDir is <root>/pods/<uid>/volume-subpaths/<volume>.
func (l Layout) VolumeSubpathsDir(uid, volume string) (string, error) {
	base, err := l.PodVolumeSubpathsDir(uid)
	if err != nil {
		return "", err
	}
	if err := ValidateVolumeDirName(volume); err != nil {
		return "", err
	}
	return filepath.Join(base, volume), nil
}

// SubpathDir is <root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>,
// where the kubelet bind-mounts the index-th subPath mount of a container.
func (l Layout) SubpathDir(uid, volume, container string, index int) (string, error) {
	base, err := l.VolumeSubpathsDir(uid, volume)
	if err != nil {
		return "", err
	}
	if err := ValidateContainerName(container); err != nil {
		return "", err
	}
	if index < 0 {
		return "", &InvalidNameError{Field: "subpath index", Value: strconv.Itoa(index), Reason: "must not be negative"}
	}
	return filepath.Join(base, container, strconv.Itoa(index)), nil
}

// VolumePath is what a volume directory's path says about the volume.
type VolumePath struct {
	PodUID string
	Plugin string // unescaped: kubernetes.io/empty-dir
	Volume string
}

// ParseVolumePath parses <root>/pods/<uid>/volumes/<escaped-plugin>/<volume>
// back into its parts. path must be absolute, clean and under this root;
// every part is validated (so the result rebuilds the same path with
// VolumeDir).
func (l Layout) ParseVolumePath(path string) (VolumePath, error) {
	prefix := l.PodsDir() + "/"
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok || l.root == "" {
		return VolumePath{}, fmt.Errorf("%w: %q is not under %s", ErrNotVolumePath, path, prefix)
	}
	return parseVolumeRel(path, rest)
}

func parseVolumeRel(path, rest string) (VolumePath, error) {
	if why := unclean(path); why != "" {
		return VolumePath{}, fmt.Errorf("%w: %q is not clean: %s", ErrNotVolumePath, path, why)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[1] != volumesDirName {
		return VolumePath{}, fmt.Errorf("%w: %q does not end in pods/<uid>/volumes/<plugin>/<volume>", ErrNotVolumePath, path)
	}
	if err := ValidatePodUID(parts[0]); err != nil {
		return VolumePath{}, fmt.Errorf("%w: %w", ErrNotVolumePath, err)
	}
	plugin, err := UnescapePluginName(parts[2])
	if err != nil {
		return VolumePath{}, fmt.Errorf("%w: %w", ErrNotVolumePath, err)
	}
	if err := ValidateVolumeDirName(parts[3]); err != nil {
		return VolumePath{}, fmt.Errorf("%w: %w", ErrNotVolumePath, err)
	}
	return VolumePath{PodUID: parts[0], Plugin: plugin, Volume: parts[3]}, nil
}

// ParseVolumePathAnyRoot parses a volume directory path whose kubelet root
// is not known in advance (a path given on a command line): the root is
// what precedes the last "/pods/<uid>/volumes/<plugin>/<volume>".
func ParseVolumePathAnyRoot(path string) (Layout, VolumePath, error) {
	if !filepath.IsAbs(path) {
		return Layout{}, VolumePath{}, fmt.Errorf("%w: %q is not absolute", ErrNotVolumePath, path)
	}
	if why := unclean(path); why != "" {
		return Layout{}, VolumePath{}, fmt.Errorf("%w: %q is not clean: %s", ErrNotVolumePath, path, why)
	}
	parts := strings.Split(path, "/")
	if len(parts) < 7 || parts[len(parts)-5] != podsDirName {
		return Layout{}, VolumePath{}, fmt.Errorf("%w: %q does not end in pods/<uid>/volumes/<plugin>/<volume>", ErrNotVolumePath, path)
	}
	root := strings.Join(parts[:len(parts)-5], "/")
	l, err := NewLayout(root)
	if err != nil {
		return Layout{}, VolumePath{}, fmt.Errorf("%w: %w", ErrNotVolumePath, err)
	}
	vp, err := l.ParseVolumePath(path)
	return l, vp, err
}

// unclean says what keeps path from being clean (filepath.Clean(path) ==
// path), in the terms of what was typed — "has a doubled '/'", "has a
// trailing '/.'" — so that an error can say what to fix; "" when path is
// clean.
func unclean(path string) string {
	if filepath.Clean(path) == path {
		return ""
	}
	if path == "" {
		return "is empty"
	}
	var why []string
	if strings.Contains(path, "//") {
		why = append(why, "has a doubled '/'")
	}
	elems := strings.Split(strings.TrimRight(path, "/"), "/")
	last := len(elems) - 1
	if len(path) > 1 && strings.HasSuffix(path, "/") {
		why = append(why, "has a trailing '/'")
	}
	if elems[last] == "." {
		why = append(why, "has a trailing '/.'")
	}
	dot, dotDot := false, false
	for i, e := range elems {
		dot = dot || (e == "." && i != last)
		dotDot = dotDot || e == ".."
	}
	if dot {
		why = append(why, "contains a '.' element")
	}
	if dotDot {
		why = append(why, "contains a '..' element")
	}
	if len(why) == 0 {
		return "is not in its shortest form"
	}
	return strings.Join(why, ", ")
}
