package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"

	"github.com/nodevol/nodevol/internal/base/privatens"
	"github.com/nodevol/nodevol/mountdetect"
)

// envDemoParentNS carries, into the re-executed demo, the mount namespace
// of the process that started it. The child mounts only when its own
// namespace differs: a stray or inherited variable can never make the demo
// mount on the host.
const envDemoParentNS = "NODEVOL_DEMO_PARENT_MNTNS"

// isolateDemo decides where the demo runs. As root it re-executes this
// binary (with args) in a new mount namespace, whose mounts the Go runtime
// makes private, passes sigs on to it, waits for it and returns done with
// its exit code; the re-executed process then gets canMount. Without root,
// or when no namespace can be made, the demo runs here without mounting.
//
// The re-executed demo makes its sandbox in a directory made here (its
// TMPDIR), which is removed once it has exited: whatever it could not
// clean up (it was killed) is then plain directories, its mounts gone with
// its namespace.
//
// It re-executes /proc/self/exe, so it must not be called from a test
// binary as root.
func isolateDemo(args []string, sigs <-chan os.Signal, stdout, stderr io.Writer) (iso isolation, code int, done bool) {
	if os.Geteuid() != 0 {
		return isolation{skip: "not root: Default volumes only, and no NAS mount; run as root to see a refused teardown."}, 0, false
	}
	if privatens.Child(envDemoParentNS) {
		return isolation{canMount: true}, 0, false
	}
	if _, ok := os.LookupEnv(envDemoParentNS); ok {
		return isolation{skip: envDemoParentNS + " is set but this is not a new mount namespace: skipping the tmpfs NAS mount rather than mount on the host."}, 0, false
	}
	tmp, err := os.MkdirTemp("", "nodevol-demo-ns-")
	if err != nil {
		fmt.Fprintf(stderr, "nodevol demo: %v\n", err)
		return isolation{}, exitError, true
	}
	code, err = privatens.Reexec(envDemoParentNS, args, privatens.Streams{Stdout: stdout, Stderr: stderr, Env: []string{"TMPDIR=" + tmp}, Signals: sigs})
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		fmt.Fprintf(stderr, "nodevol demo: the demo in its private mount namespace left %s behind in %s; removing it\n", entries[0].Name(), tmp)
	}
	if rerr := mountdetect.RemoveAll(tmp); rerr != nil {
		fmt.Fprintf(stderr, "nodevol demo: clean up %s: %v\n", tmp, rerr)
		return isolation{}, exitError, true
	}
	switch {
	case err != nil:
		return isolation{skip: fmt.Sprintf("cannot create a private mount namespace (%v): skipping the tmpfs NAS mount rather than mount on the host.", err)}, 0, false
	case code == 128+int(syscall.SIGINT) || code == 128+int(syscall.SIGTERM) || code == 128+int(syscall.SIGPIPE):
		return isolation{}, code, true // interrupted: the demo said so (or, for SIGPIPE, stopped quietly), or died of it before it could
	case code > exitError:
		fmt.Fprintf(stderr, "nodevol demo: the demo in its private mount namespace died (status %d)\n", code)
		return isolation{}, exitError, true
	}
	return isolation{}, code, true
}

// mountNAS mounts the demo's "NAS": a 1 MiB tmpfs.
func mountNAS(dir string) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
		return &os.PathError{Op: "mount", Path: dir, Err: err}
	}
	return nil
}

// unmountNAS unmounts it the ordinary way, as an operator would.
func unmountNAS(dir string) error {
	if err := syscall.Unmount(dir, 0); err != nil {
		return &os.PathError{Op: "umount", Path: dir, Err: err}
	}
	return nil
}

// detachNAS unmounts it during cleanup, even if something still uses it.
func detachNAS(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		return &os.PathError{Op: "umount", Path: dir, Err: err}
	}
	return nil
}

// mountOf describes the mount whose mount point is dir (a resolved path)
// as "filesystem superblock-options", or "" when dir is not one: the
// options say what the emptyDir plugin asked for (size=, noswap,
// pagesize=), which nodevol check and scan do not show.
func mountOf(dir string) string {
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil || len(infos) == 0 {
		return ""
	}
	m := infos[len(infos)-1] // the top one, when several are stacked
	return m.FSType + " " + m.VFSOptions
}

// mountPointsUnder lists the mount points beneath dir, deepest first, so
// they can be unmounted in that order.
func mountPointsUnder(dir string) ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range infos {
		if m.Mountpoint != dir {
			points = append(points, m.Mountpoint)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return points, nil
}
