//go:build linux

package reconciler_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/reconciler"
	"github.com/nodevol/nodevol/volume"
)

func ExampleManager() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	layout, _ := volume.NewLayout(root)
	quiet := logr.Discard()
	// The kubelet root is the plugin's (its Host's layout): Options.Root
	// may be left out, and New refuses one that differs.
	m, err := reconciler.New(reconciler.Options{
		Plugins: []volume.Plugin{emptydir.New(volume.NewHost(layout, nil, 0))},
		Logger:  &quiet,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	m.MarkSourcesReady() // every pod source has delivered its pods

	pod := &volume.Pod{UID: "8a3f0c52", Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{}}}}
	if err := m.AddPod(pod); err != nil {
		panic(err)
	}
	wait, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if err := m.WaitForMount(wait, pod.UID); err != nil {
		panic(err)
	}
	for _, v := range m.MountedVolumes(pod.UID) {
		fmt.Println(v.Name, v.State)
	}

	m.RemovePod(pod.UID)
	// A refused teardown (a NAS mounted inside the volume) would make this
	// time out with an error naming the mounts: errors.As gives
	// *mountdetect.CrossesMountError.
	if err := m.WaitForUnmount(wait, pod.UID); err != nil {
		fmt.Println(err)
	}
	fmt.Println(len(m.MountedVolumes(pod.UID)), "volumes left")
	// Output:
	// kubernetes.io/empty-dir/8a3f0c52-cache mounted
	// 0 volumes left
}
