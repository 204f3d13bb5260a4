package volume_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/volume"
)

// A scan within limits: every pod gets the same budget of directory
// entries, so a pod that fills its own directory (here 100 entries, over
// its share of 40) is reported over budget, and the pod after it is
// listed all the same.
func ExampleLayout_ScanVolumes() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	flood := filepath.Join(root, "pods", "1-hostile", "volumes", "kubernetes.io~secret")
	_ = os.MkdirAll(flood, 0o755)
	for i := range 100 {
		_ = os.WriteFile(filepath.Join(flood, fmt.Sprint(i)), nil, 0o644)
	}
	_ = os.MkdirAll(filepath.Join(root, "pods", "2-healthy", "volumes", "kubernetes.io~empty-dir", "cache"), 0o755)

	l, _ := volume.NewLayout(root)
	limits := volume.ScanLimits{Node: 82, Dir: 1000} // (82 - 2 pod directories) / 2 pods = 40 each
	res, err := l.ScanVolumes(limits)
	if err != nil {
		panic(err)
	}
	for _, v := range res.Volumes {
		if v.PodUID == "2-healthy" {
			fmt.Println("listed:", v.PodUID, v.Plugin, v.Volume)
		}
	}
	for _, p := range res.OverBudget {
		fmt.Println("over budget:", filepath.Base(p))
	}
	for _, p := range res.Problems {
		fmt.Println("problem:", errors.Is(p.Err, volume.ErrTooManyEntries))
	}
	fmt.Println("incomplete:", res.Incomplete, "share:", limits.PodShare(2, 2))
	// Output:
	// listed: 2-healthy kubernetes.io/empty-dir cache
	// over budget: 1-hostile
	// problem: true
	// incomplete: true share: 40
}

// Each volume examined through the plugin directory that was listed,
// while ScanVolumes holds it open: a statx relative to its descriptor,
// without following a symlink (a symlink where a volume belongs is one,
// never its target).
func ExampleWithPluginDir() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	secrets := filepath.Join(root, "pods", "u1", "volumes", "kubernetes.io~secret")
	_ = os.MkdirAll(filepath.Join(secrets, "tls"), 0o755)
	_ = os.Symlink("/etc", filepath.Join(secrets, "planted"))

	l, _ := volume.NewLayout(root)
	_, err := l.ScanVolumes(volume.WithPluginDir(func(pd volume.PluginDir) {
		for _, v := range pd.Volumes {
			var st unix.Stat_t
			if err := unix.Fstatat(pd.Fd, v.Volume, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				fmt.Println(v.Volume, err)
				continue
			}
			fmt.Println(pd.Rel, v.Volume, st.Mode&unix.S_IFMT == unix.S_IFDIR)
		}
	}))
	if err != nil {
		panic(err)
	}
	// Output:
	// u1/volumes/kubernetes.io~secret planted false
	// u1/volumes/kubernetes.io~secret tls true
}
