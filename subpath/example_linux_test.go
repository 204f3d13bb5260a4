package subpath_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/subpath"
	"github.com/nodevol/nodevol/volume"
)

// Before a volume is torn down, its subPath tree is checked and cleaned:
// here a container's entry left behind without its bind mount (as after a
// crash) is listed, then removed with rmdir. A foreign mount anywhere in
// the tree would make Check and Clean refuse, changing nothing.
func Example() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	layout, _ := volume.NewLayout(root)
	const uid = "8a3f0c52"
	vol, _ := layout.VolumeDir(uid, emptydir.PluginName, "cache")
	entry, _ := layout.SubpathDir(uid, "cache", "app", 0)
	_ = os.MkdirAll(vol, 0o750)
	_ = os.MkdirAll(entry, 0o750)

	c := subpath.New(layout)
	entries, err := c.List(uid, emptydir.PluginName, "cache")
	for _, e := range entries {
		fmt.Println(e.Container, e.Index, "mount point:", e.MountPoint, err)
	}
	ctx := context.Background()
	fmt.Println("check:", c.Check(ctx, uid, emptydir.PluginName, "cache"))
	fmt.Println("clean:", c.Clean(ctx, uid, emptydir.PluginName, "cache"))
	_, err = os.Stat(filepath.Dir(entry))
	fmt.Println("container directory gone:", os.IsNotExist(err))
	// Output:
	// app 0 mount point: false <nil>
	// check: <nil>
	// clean: <nil>
	// container directory gone: true
}
