//go:build linux

package emptydir_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func Example() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	layout, _ := volume.NewLayout(root)
	plugin := emptydir.New(volume.NewHost(layout, nil, 0))

	pod := &volume.Pod{UID: "8a3f0c52", Volumes: []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{}}}}
	m, _ := plugin.NewMounter(&pod.Volumes[0], pod)
	if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
		fmt.Println(err)
	}
	os.WriteFile(m.Path()+"/scratch", []byte("x"), 0o644)

	u, _ := plugin.NewUnmounter("cache", "8a3f0c52")
	err := u.TearDown(context.Background())
	var crossing *mountdetect.CrossesMountError
	switch {
	case errors.As(err, &crossing):
		fmt.Println("refused, nothing deleted; mounted inside:", crossing.Mounts)
	case err != nil:
		fmt.Println(err)
	}
	_, err = os.Stat(m.Path())
	fmt.Println("removed:", errors.Is(err, os.ErrNotExist))
	// Output: removed: true
}

// A volume directory with a mode of its own (the EmptyDirVolumeMode
// feature): 0750, whatever the umask.
func Example_mode() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	layout, _ := volume.NewLayout(root)
	plugin := emptydir.New(volume.NewHost(layout, nil, 0))

	mode := uint32(0o750)
	pod := &volume.Pod{UID: "8a3f0c52", Volumes: []volume.Spec{{Name: "private", EmptyDir: &volume.EmptyDirSource{Mode: &mode}}}}
	m, _ := plugin.NewMounter(&pod.Volumes[0], pod)
	if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
		fmt.Println(err)
	}
	fi, _ := os.Stat(m.Path())
	fmt.Println(fi.Mode())
	// Output: drwxr-x---
}

// Resizing a Memory volume in place, and what its errors mean to a
// volume manager.
func ExamplePlugin_ResizeVolume() {
	layout, _ := volume.NewLayout("/var/lib/kubelet")
	plugin := emptydir.New(volume.NewHost(layout, nil, 8<<30))

	err := plugin.ResizeVolume(context.Background(), "8a3f0c52", "cache", 256<<20)
	var shrink *emptydir.ShrinkBelowUseError
	switch {
	case err == nil:
		fmt.Println("resized")
	case errors.As(err, &shrink):
		fmt.Printf("the volume uses %d bytes; not shrinking it to %d\n", shrink.UsedBytes, shrink.RequestedBytes)
	case errors.Is(err, emptydir.ErrResizeDeferred):
		fmt.Println("not set up yet: retry after SetUp")
	case errors.Is(err, emptydir.ErrResizeUnsupported):
		fmt.Println("not a Memory volume, or no size: never retried")
	case errors.Is(err, emptydir.ErrForeignMount):
		fmt.Println("something else is mounted there: refused, nothing changed")
	default:
		fmt.Println(volume.KindOf(err), err)
	}
}

// Plans of every emptyDir of a pod, as a scan makes them: the pod's
// directories are opened once for all of its volumes.
func ExamplePlanner() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	layout, _ := volume.NewLayout(root)
	plugin := emptydir.New(volume.NewHost(layout, nil, 0))
	pod := &volume.Pod{UID: "8a3f0c52", Volumes: []volume.Spec{
		{Name: "cache", EmptyDir: &volume.EmptyDirSource{}},
		{Name: "scratch", EmptyDir: &volume.EmptyDirSource{}},
	}}
	for i := range pod.Volumes {
		m, _ := plugin.NewMounter(&pod.Volumes[i], pod)
		if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
			fmt.Println(err)
		}
	}

	planner := plugin.NewPlanner()
	defer planner.Close()
	tab, err := mountdetect.ReadMountTable() // read once for all the plans
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range []string{"cache", "scratch"} {
		plan, err := planner.PlanTearDown(pod.UID, name, tab)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(name+":", plan.Action, plan.Code)
	}
	// Output:
	// cache: remove not-mounted
	// scratch: remove not-mounted
}

// Plans of the emptyDirs a scan lists, made through the pod and plugin
// directories the listing holds open (borrowed for the call: the Planner
// neither closes nor keeps them).
func ExamplePlanner_PlanListed() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	layout, _ := volume.NewLayout(root)
	plugin := emptydir.New(volume.NewHost(layout, nil, 0))
	pod := &volume.Pod{UID: "8a3f0c52", Volumes: []volume.Spec{
		{Name: "cache", EmptyDir: &volume.EmptyDirSource{}},
		{Name: "scratch", EmptyDir: &volume.EmptyDirSource{}},
	}}
	for i := range pod.Volumes {
		m, _ := plugin.NewMounter(&pod.Volumes[i], pod)
		if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
			fmt.Println(err)
		}
	}

	planner := plugin.NewPlanner()
	defer planner.Close()
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = layout.ScanVolumes(volume.WithPluginDir(func(pd volume.PluginDir) {
		if pd.Volumes[0].Plugin != emptydir.PluginName {
			return
		}
		planner.PlanListed(pd, tab, func(i int, plan emptydir.Plan, err error) {
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Println(pd.Volumes[i].Volume+":", plan.Action, plan.Code)
		})
	}))
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// cache: remove not-mounted
	// scratch: remove not-mounted
}
