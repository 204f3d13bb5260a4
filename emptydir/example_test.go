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
