package fsquota_test

import (
	"errors"
	"fmt"

	"github.com/nodevol/nodevol/fsquota"
)

// A quota manager for emptyDir volumes that enforces sizeLimit, with its
// bookkeeping in the standard files.
func ExampleManager_Assign() {
	m := fsquota.New(fsquota.Enforce(),
		fsquota.WithProjectsFile("/etc/projects"),
		fsquota.WithProjidFile("/etc/projid"))
	id, err := m.Assign("/var/lib/kubelet/pods/uid/volumes/kubernetes.io~empty-dir/cache", 1<<30)
	switch {
	case errors.Is(err, fsquota.ErrUnsupported):
		fmt.Println("no project quotas here; measure usage by walking:", err)
	case err != nil:
		fmt.Println("assign:", err)
	default:
		fmt.Println("project", id)
	}
}

func ExampleManager_Usage() {
	m := fsquota.New()
	bytes, inodes, err := m.Usage("/var/lib/kubelet/pods/uid/volumes/kubernetes.io~empty-dir/cache")
	if errors.Is(err, errors.ErrUnsupported) {
		return // walk the tree instead
	}
	fmt.Println(bytes, inodes, err)
}

// quotas is emptydir.Quotas, copied so that this package never imports its
// consumer; the assignment below fails to compile if *Manager stops
// satisfying it.
type quotas interface {
	Assign(path string, limitBytes int64) (projectID uint32, err error)
	Clear(path string) error
	Usage(path string) (bytes, inodes int64, err error)
}

var _ quotas = (*fsquota.Manager)(nil)
