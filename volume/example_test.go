package volume_test

import (
	"fmt"

	"github.com/nodevol/nodevol/volume"
)

func ExampleLayout() {
	l, err := volume.NewLayout(volume.DefaultRoot)
	if err != nil {
		panic(err)
	}
	dir, _ := l.VolumeDir("8a3f0c52", "kubernetes.io/empty-dir", "cache")
	fmt.Println(dir)
	vp, _ := l.ParseVolumePath(dir)
	fmt.Printf("%+v\n", vp)
	_, err = l.VolumeDir("../../etc", "kubernetes.io/empty-dir", "cache")
	fmt.Println(err)
	// Output:
	// /var/lib/kubelet/pods/8a3f0c52/volumes/kubernetes.io~empty-dir/cache
	// {PodUID:8a3f0c52 Plugin:kubernetes.io/empty-dir Volume:cache}
	// invalid pod UID "../../etc": must not contain '/'
}

func ExampleEscapePluginName() {
	dir, _ := volume.EscapePluginName("kubernetes.io/empty-dir")
	name, _ := volume.UnescapePluginName(dir)
	fmt.Println(dir, name)
	// Output: kubernetes.io~empty-dir kubernetes.io/empty-dir
}
