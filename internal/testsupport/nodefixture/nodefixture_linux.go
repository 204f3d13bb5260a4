// Package nodefixture builds a kubelet root shaped like a busy node, for
// the scan benchmark (internal/cli) and the agent's steady-state
// measurement (hack/serve-steady-state.sh, through hack/nodefixture). It
// mounts when asked to: run it only in a private mount namespace.
package nodefixture

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/treespec"
	"github.com/nodevol/nodevol/volume"
)

// VolumesPerPod is the number of volume directories of each pod Make
// makes, in this mix (what the kubelet writes for each plugin):
//
//	projected  kube-api-access-xxxxx  the service account token, CA and namespace
//	secret     tls                    a secret
//	configmap  config, scripts        two config maps
//	empty-dir  cache, tmp, logs       Default medium
//	empty-dir  shm                    Memory medium in one pod of four, else Default
//	csi        pvc-…-0, pvc-…-1       vol_data.json and the target directory mount/
const VolumesPerPod = 10

// Shape is a node: Pods pods of VolumesPerPod volume directories each,
// and, when Mounted, exactly Pods mounts (see Make).
type Shape struct {
	Pods    int
	Mounted bool
}

// Danger, InUse and Subpaths are how many volumes of s Make puts in
// danger (a NAS nested in an emptyDir), in use (a mount of their own)
// and with a container's subPath bind.
func (s Shape) Danger() int {
	if !s.Mounted {
		return 0
	}
	return s.Pods / 100
}

// Subpaths: see Danger.
func (s Shape) Subpaths() int {
	if !s.Mounted {
		return 0
	}
	return s.Pods / 50
}

// InUse: see Danger.
func (s Shape) InUse() int {
	if !s.Mounted {
		return 0
	}
	return s.Pods - s.Danger() - s.Subpaths()
}

// Make makes a kubelet root at root (which must not exist) shaped s.
// Each pod gets VolumesPerPod volume directories; emptyDirs are set up by
// nodevol's emptyDir plugin (its metadata and ready marker, as on a node
// running nodevol-kubelet), secret, configmap and projected volumes hold
// the kubelet's atomic-writer layout (a timestamped directory, the ..data
// symlink and one symlink per key), and each pod directory has the
// kubelet's plugins/ ready markers for the wrapped volumes, etc-hosts and
// a containers/ entry.
//
// With s.Mounted (root only) it adds exactly s.Pods mounts: s.Danger() of
// them a "NAS" tmpfs nested in a Default emptyDir, s.Subpaths() a
// container's subPath bind of a directory of the logs emptyDir (as the
// kubelet makes them), and the rest one mount in each of the other pods,
// in turn a tmpfs on the projected volume, on the secret, a Memory
// emptyDir's own tmpfs (made by SetUp), and a tmpfs on a CSI volume's
// target directory mount/. Nothing is unmounted: the caller detaches
// what is beneath root (or lets its private mount namespace go).
func Make(root string, s Shape) error {
	if _, err := os.Lstat(root); err == nil {
		return fmt.Errorf("%s exists", root)
	}
	layout, err := volume.NewLayout(root)
	if err != nil {
		return err
	}
	plugin := emptydir.New(volume.NewHost(layout, nil, 1<<30))
	for p := range s.Pods {
		uid := fmt.Sprintf("%08x-1d4e-4b7a-9c21-%012x", p, p)
		kind := -1 // which volume of the pod gets a mount; -1: none
		switch {
		case !s.Mounted:
		case p < s.Danger():
			kind = mountNAS
		case p < s.Danger()+s.Subpaths():
			kind = mountSubpath
		default:
			kind = p % 4
		}
		if err := makePod(layout, plugin, uid, kind); err != nil {
			return fmt.Errorf("pod %d: %w", p, err)
		}
	}
	return nil
}

// Which volume of a pod Make mounts something on.
const (
	mountProjected = iota
	mountSecret
	mountMemory
	mountCSI
	mountNAS
	mountSubpath
)

func makePod(layout volume.Layout, plugin *emptydir.Plugin, uid string, kind int) error {
	podDir, err := layout.PodDir(uid)
	if err != nil {
		return err
	}
	// emptyDirs, through the plugin as the volume manager calls it.
	var eds []volume.Spec
	for _, name := range []string{"cache", "tmp", "logs"} {
		eds = append(eds, volume.Spec{Name: name, EmptyDir: &volume.EmptyDirSource{}})
	}
	shm := volume.EmptyDirSource{}
	if kind == mountMemory {
		shm.Medium = volume.StorageMediumMemory
	}
	eds = append(eds, volume.Spec{Name: "shm", EmptyDir: &shm})
	pod := &volume.Pod{UID: uid, Volumes: eds}
	for i := range pod.Volumes {
		m, err := plugin.NewMounter(&pod.Volumes[i], pod)
		if err != nil {
			return err
		}
		if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
			return fmt.Errorf("SetUp(%s): %w", pod.Volumes[i].Name, err)
		}
	}
	// The kubelet's atomic-writer volumes: secret, configmap and
	// projected wrap an emptyDir (a ready marker under
	// plugins/kubernetes.io~empty-dir/wrapped_<name>).
	const ts = "..2026_11_23_10_00_00.123456789"
	writer := []struct {
		plugin, name string
		keys         []string
		mount        bool
	}{
		{"kubernetes.io/projected", "kube-api-access-" + uid[:5], []string{"ca.crt", "namespace", "token"}, kind == mountProjected},
		{"kubernetes.io/secret", "tls", []string{"tls.crt", "tls.key"}, kind == mountSecret},
		{"kubernetes.io/configmap", "config", []string{"app.yaml"}, false},
		{"kubernetes.io/configmap", "scripts", []string{"start.sh", "health.sh"}, false},
	}
	for _, w := range writer {
		d, err := layout.VolumeDir(uid, w.plugin, w.name)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if w.mount {
			if err := tmpfs(d); err != nil {
				return err
			}
		}
		specs := []string{"dir " + ts, "symlink ..data " + ts}
		for _, k := range w.keys {
			specs = append(specs, "file "+ts+"/"+k+" x", "symlink "+k+" ..data/"+k)
		}
		if err := treespec.Build(d, specs...); err != nil {
			return err
		}
		if err := treespec.Build(podDir, "file plugins/kubernetes.io~empty-dir/wrapped_"+w.name+"/ready "); err != nil {
			return err
		}
	}
	// CSI: vol_data.json beside the target directory the driver mounts.
	for i := range 2 {
		pv := fmt.Sprintf("pvc-%s-%d", uid[:8], i)
		d, err := layout.VolumeDir(uid, "kubernetes.io/csi", pv)
		if err != nil {
			return err
		}
		err = treespec.Build(d,
			`file vol_data.json {"attachmentID":"csi-`+uid[:12]+`","driverName":"ebs.csi.aws.com","nodeName":"node-1","specVolID":"`+pv+`","volumeHandle":"vol-0`+uid[:8]+`","volumeLifecycleMode":"Persistent"}`,
			"dir mount")
		if err != nil {
			return err
		}
		if i == 0 && kind == mountCSI {
			if err := tmpfs(filepath.Join(d, "mount")); err != nil {
				return err
			}
		}
	}
	if err := treespec.Build(podDir, "file etc-hosts 127.0.0.1 localhost", "file containers/app/0a1b2c3d "); err != nil {
		return err
	}
	switch kind {
	case mountNAS:
		d, err := layout.VolumeDir(uid, emptydir.PluginName, "cache")
		if err != nil {
			return err
		}
		nas := filepath.Join(d, "nas")
		if err := os.Mkdir(nas, 0o755); err != nil {
			return err
		}
		return tmpfs(nas)
	case mountSubpath:
		d, err := layout.VolumeDir(uid, emptydir.PluginName, "logs")
		if err != nil {
			return err
		}
		logs := filepath.Join(d, "app")
		if err := treespec.Build(logs, "file current.log x"); err != nil {
			return err
		}
		sp, err := layout.VolumeSubpathsDir(uid, "logs")
		if err != nil {
			return err
		}
		target := filepath.Join(sp, "app", "0")
		if err := os.MkdirAll(target, 0o750); err != nil {
			return err
		}
		if err := unix.Mount(logs, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", logs, target, err)
		}
	}
	return nil
}

func tmpfs(dir string) error {
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}
