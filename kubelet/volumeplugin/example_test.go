package volumeplugin_test

import (
	"fmt"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svolume "k8s.io/kubernetes/pkg/volume"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"

	"github.com/nodevol/nodevol/kubelet/volumeplugin"
)

// A kubelet registers the plugin where it registered upstream's emptyDir
// plugin; the volume manager then finds it by spec or by name.
func ExampleProbeVolumePlugins() {
	root, _ := os.MkdirTemp("", "kubelet-root-")
	defer os.RemoveAll(root)

	var plugins k8svolume.VolumePluginMgr
	host := volumetest.NewFakeVolumeHost(&testing.T{}, root, nil, nil) // the kubelet passes its own host
	if err := plugins.InitPlugins(volumeplugin.ProbeVolumePlugins(), nil, host); err != nil {
		fmt.Println(err)
		return
	}
	spec := k8svolume.NewSpecFromVolume(&v1.Volume{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	plugin, err := plugins.FindPluginBySpec(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "0b4d6c2e-5a1f-4e8b-9c3d-7f2a1b6e4d90"}}
	mounter, _ := plugin.NewMounter(spec, pod)
	if err := mounter.SetUp(k8svolume.MounterArgs{}); err != nil {
		fmt.Println(err)
		return
	}
	fi, _ := os.Stat(mounter.GetPath())
	fmt.Println(plugin.GetPluginName(), fi.Mode())

	unmounter, _ := plugin.NewUnmounter("cache", pod.UID)
	if err := unmounter.TearDown(); err != nil {
		fmt.Println(err) // a mount inside the volume: refused, nothing deleted
		return
	}
	_, err = os.Stat(mounter.GetPath())
	fmt.Println("removed:", os.IsNotExist(err))
	// Output:
	// kubernetes.io/empty-dir drwxrwxrwx
	// removed: true
}
