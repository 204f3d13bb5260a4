package volume_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/nodevol/nodevol/volume"
)

// A node agent that tears volumes down takes its root's lock for as long
// as it runs; a second one on the same root is told who holds it.
func ExampleLockRoot() {
	root, err := os.MkdirTemp("", "kubelet-root")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	l, err := volume.NewLayout(root)
	if err != nil {
		fmt.Println(err)
		return
	}
	lock, err := volume.LockRoot(l, volume.LockVolumeManager, volume.LockOptions{Program: "my-kubelet"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release()

	_, err = volume.LockRoot(l, volume.LockVolumeManager, volume.LockOptions{Program: "another-agent"})
	var locked *volume.RootLockedError
	if errors.As(err, &locked) {
		fmt.Println("refused: the root's volume manager is", locked.Holder.Program)
	}
	// Output: refused: the root's volume manager is my-kubelet
}
