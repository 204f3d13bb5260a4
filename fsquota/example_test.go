package fsquota_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/nodevol/nodevol/fsquota"
)

// A quota manager that enforces a size, with its bookkeeping in the
// standard files. The directory is handed over open: the Manager acts on
// that descriptor and only records the path. (Below a directory others can
// write, such as the kubelet root, open it without following symlinks, as
// the emptyDir plugin does.)
func ExampleManager_Assign() {
	m := fsquota.New(fsquota.Enforce(),
		fsquota.WithProjectsFile("/etc/projects"),
		fsquota.WithProjidFile("/etc/projid"))
	const path = "/srv/scratch/team-a"
	dir, err := os.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dir.Close()
	p, err := m.Assign(int(dir.Fd()), path, 1<<30)
	switch {
	case errors.Is(err, fsquota.ErrUnsupported):
		fmt.Println("no project quotas here; measure usage by walking:", err)
	case err != nil:
		fmt.Println("assign:", err)
	default:
		// Record p (ID and the directory's identity) for Clear.
		fmt.Println("project", p.ID)
	}
}

func ExampleManager_DirUsage() {
	m := fsquota.New()
	u, err := m.DirUsage("/srv/data")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(u.Bytes, u.Inodes, u.Source)
}

// quotas is emptydir.Quotas, copied so that this package never imports its
// consumer; the assignment below fails to compile if *Manager stops
// satisfying it.
type quotas interface {
	Assign(dirFd int, path string, limitBytes int64) (fsquota.Project, error)
	Clear(dirFd int, path string, p fsquota.Project) error
	Usage(dirFd int, path string) (fsquota.Usage, error)
}

var _ quotas = (*fsquota.Manager)(nil)
