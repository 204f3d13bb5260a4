//go:build linux

package mountdetect_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/mountdetect"
)

func ExampleRemoveAll() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	vol := filepath.Join(dir, "pods/uid/volumes/kubernetes.io~empty-dir/cache")
	os.MkdirAll(filepath.Join(vol, "a/b"), 0o755)
	os.WriteFile(filepath.Join(vol, "a/b/data"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(vol, "etc-link")) // unlinked, never followed

	err = mountdetect.RemoveAll(vol)
	var crossing *mountdetect.CrossesMountError
	switch {
	case errors.As(err, &crossing):
		// Something is mounted inside the volume: nothing was deleted.
		for _, m := range crossing.Mounts {
			fmt.Println("mounted inside:", m.MountPoint, m.FSType, m.Source)
		}
	case err != nil:
		log.Fatal(err)
	}
	_, err = os.Lstat(vol)
	fmt.Println("removed:", errors.Is(err, os.ErrNotExist))
	_, err = os.Stat("/etc")
	fmt.Println("/etc intact:", err == nil)
	// Output:
	// removed: true
	// /etc intact: true
}

func ExampleRemoveAll_invalidPath() {
	err := mountdetect.RemoveAll("/")
	fmt.Println(errors.Is(err, mountdetect.ErrInvalidPath))
	fmt.Println(err)
	// Output:
	// true
	// invalid path "/": refusing to remove the root directory
}

func ExampleIsMountPoint() {
	mounted, sure, err := mountdetect.IsMountPoint("/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(mounted, sure)
	// Output: true true
}

func ExampleDetect() {
	info, err := mountdetect.Detect("/dev/shm")
	if err != nil {
		fmt.Println("no /dev/shm here")
		return
	}
	// On most Linux systems /dev/shm is a tmpfs mount: an emptyDir of
	// medium Memory looks just like it (emptydir.MediumOf).
	fmt.Println(info.FSType, info.MountPoint)
}

func ExampleParseHugePageSize() {
	size, ok, err := mountdetect.ParseHugePageSize("rw,relatime,pagesize=2M")
	fmt.Println(size, ok, err)
	// Output: 2097152 true <nil>
}

// A node agent that removes volumes on behalf of the host first makes sure
// it sees the host's mount table: a NAS mounted in the host's namespace
// only is invisible from a container's, and removing the directory it is
// mounted on would detach it on the host.
func ExampleCheckMountNamespace() {
	// In a DaemonSet whose pods have a PID namespace of their own, name the
	// host's /proc mounted into the container: mountdetect.HostProc("/host/proc").
	ns := mountdetect.CheckMountNamespace()
	switch {
	case ns.State == mountdetect.MountNamespaceHost:
		// Safe to act on what IsMountPoint, NestedMounts and RemoveAll see.
	case ns.State == mountdetect.MountNamespaceForeign:
		log.Fatalf("refusing to remove volumes: %s", ns)
	case errors.Is(ns.Err, mountdetect.ErrPID1Hidden):
		// Not root: it cannot read PID 1's namespaces (nor, usually,
		// unmount or remove what the kubelet owns).
		log.Printf("warning: %s", ns)
	default: // for example mountdetect.ErrNotHostInit: in a container's PID namespace
		log.Fatalf("refusing to remove volumes: %s", ns)
	}
}

// ExampleMountTable_Child examines the volume directories of a plugin
// directory without opening any of them: a mount root from the table by
// its mount ID, a plain directory from its plugin directory, read once. A
// propagated copy of a volume's mount in this namespace is never held
// open, so the kubelet's unmount of the original is not made to fail.
func ExampleMountTable_Child() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	plugin := filepath.Join(dir, "pods/uid/volumes/kubernetes.io~secret")
	os.MkdirAll(filepath.Join(plugin, "token"), 0o755)

	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		log.Fatal(err)
	}
	fd, err := unix.Open(plugin, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer unix.Close(fd)
	parent, err := tab.Parent(fd, plugin)
	if err != nil {
		log.Fatal(err)
	}
	e, err := mountdetect.LookAt(fd, "token", filepath.Join(plugin, "token"), mountdetect.LookOnly)
	if err != nil {
		log.Fatal(err)
	}
	if e.Root {
		at, beneath, ok, err := tab.MountsOnRoot(e)
		if err == nil && ok {
			fmt.Println("mounted:", len(at), "on it,", len(beneath), "beneath it")
		}
		return
	}
	_, _, beneath, ok, err := tab.Child(parent, e, "token")
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		fmt.Println("not answered from the table: open it and ask MountsAtEntry")
		return
	}
	fmt.Println("a plain directory,", len(beneath), "mounts beneath it")
	// Output: a plain directory, 0 mounts beneath it
}
