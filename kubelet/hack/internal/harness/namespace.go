package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// innerArg, as the first argument, makes the binary the namespace's PID 1
// (runInner) instead of the driver. It is not a flag: users never pass it.
const innerArg = "__nodevol_e2e_inner__"

// namespaceFlags are the namespaces the driver re-executes itself in. A
// new pid namespace needs clone, not unshare, for the child to be its
// PID 1; when PID 1 exits the kernel kills every process in it, and when
// the last process of the mount namespace is gone every mount in it goes.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// enterNamespace prepares the fresh namespaces from inside, as PID 1:
// mounts made here never propagate to the host, /proc shows this pid
// namespace, the loopback interface is up, and the sysctls the kubelet
// would set show it the values it wants.
func enterNamespace(workdir string) error {
	if os.Getpid() != 1 {
		return fmt.Errorf("inner half runs as pid %d, not as PID 1 of a new pid namespace", os.Getpid())
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return &os.PathError{Op: "mount MS_REC|MS_PRIVATE", Path: "/", Err: err}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return &os.PathError{Op: "mount proc", Path: "/proc", Err: err}
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	return maskSysctls(filepath.Join(workdir, "sysctl"))
}

// loopbackUp sets IFF_UP on lo: the kubelet and containerd listen on
// 127.0.0.1 in the private network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("socket", err))
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("SIOCGIFFLAGS", err))
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("SIOCSIFFLAGS", err))
	}
	return nil
}

// maskSysctls bind-mounts a file holding the wanted value over each
// /proc/sys file whose value differs, in this mount namespace only.
func maskSysctls(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range kubeletSysctls {
		target := filepath.Join("/proc/sys", s.Key)
		cur, err := os.ReadFile(target)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(cur)) == s.Want {
			continue
		}
		f := filepath.Join(dir, strings.ReplaceAll(s.Key, "/", "."))
		if err := os.WriteFile(f, []byte(s.Want+"\n"), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(f, target, "", unix.MS_BIND, ""); err != nil {
			return &os.PathError{Op: "mount MS_BIND " + f, Path: target, Err: err}
		}
	}
	return nil
}

// privateHostDirs covers each of hostDirs with a fresh tmpfs. They are
// never detached: the next kubelet's cover the previous ones, and all go
// with the namespace. (Detaching them while a process of the namespace
// might still write there would let it write into the host's directory.)
func privateHostDirs() error {
	for _, d := range hostDirs {
		if err := unix.Mount("nodevol-e2e", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m,mode=0755"); err != nil {
			return &os.PathError{Op: "mount tmpfs", Path: d, Err: err}
		}
	}
	return nil
}

// killAllBut sends SIGKILL to every process of the namespace except PID 1
// (this one) and keep, and waits up to grace until none of them is left
// but as a zombie: what a stopped kubelet and containerd leave behind
// (shims, containers reparented to PID 1) does not outlive its turn.
func killAllBut(keep []int, grace time.Duration) error {
	deadline := time.Now().Add(grace)
	for {
		left, err := liveProcesses(keep)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive %s after SIGKILL", left, grace)
		}
		for _, pid := range left {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveProcesses lists the namespace's processes that are not zombies,
// except PID 1 and keep.
func liveProcesses(keep []int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || slices.Contains(keep, pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// The state follows the command name, which is in parentheses
		// and may itself contain ") ".
		if k := strings.LastIndexByte(string(b), ')'); k >= 0 && k+2 < len(b) && b[k+2] == 'Z' {
			continue
		}
		live = append(live, pid)
	}
	return live, nil
}
