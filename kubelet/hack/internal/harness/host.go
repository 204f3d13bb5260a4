package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
)

// hostDirs are the paths the kubelet and containerd use whatever their
// configuration says (device-plugins, container log links, shim sockets).
// Inside the namespace each gets a private tmpfs; the host only ever sees
// an empty directory, created for the run when missing and removed after.
//
// A whole cluster adds two: /run/netns, where containerd keeps its pods'
// network namespaces (and ip netns the nodes'), and /var/lib/cni, where
// libcni caches each attachment's result.
var hostDirs = []string{"/run/containerd", "/var/lib/kubelet", "/var/log/containers", "/run/netns", "/var/lib/cni"}

// sysctl is a host-wide kernel setting the kubelet changes at start. The
// namespace shows the kubelet a file holding Want bind-mounted over the
// /proc/sys file, so the host keeps its own value.
type sysctl struct {
	Key  string // path under /proc/sys
	Want string
}

var kubeletSysctls = []sysctl{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// watchedSysctls are host settings the run changes only in its own
// network namespace (the cluster's forwarding): compared, never masked.
// vm/nr_hugepages is the soak's, which reserves huge pages for its run
// (reserveHugePages) and gives them back.
var watchedSysctls = []string{"net/ipv4/ip_forward", hugePagesSysctl}

// hostState is what the run must leave as it found it.
type hostState struct {
	Mounts    []string          // "mountpoint fstype source" of every host mount
	Sysctls   map[string]string // key -> value
	Dirs      map[string]bool   // hostDirs and the cgroup root dirs -> exists
	Processes []string          // "pid cmdline" of processes that mention the workdir or the cgroup (the go run that started the driver does)
	Listening []string          // "tcp6 port" of the host's listening sockets on the control plane's ports
	Links     []string          // the host's network interfaces (the cluster's bridge and veths live in the run's namespaces)
	Netns     []string          // the named network namespaces in the host's /run/netns
}

// snapshotHost reads the host's state as far as the run could change it.
func snapshotHost(workdir string, cgroupDirs []string, cgroupName string) (hostState, error) {
	var st hostState
	mounts, err := mountinfo.GetMounts(nil)
	if err != nil {
		return st, fmt.Errorf("reading the host's mount table: %w", err)
	}
	for _, m := range mounts {
		st.Mounts = append(st.Mounts, fmt.Sprintf("%s %s %s", m.Mountpoint, m.FSType, m.Source))
	}
	slices.Sort(st.Mounts)
	st.Sysctls = map[string]string{}
	keys := slices.Clone(watchedSysctls)
	for _, s := range kubeletSysctls {
		keys = append(keys, s.Key)
	}
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return st, fmt.Errorf("reading sysctl: %w", err)
		}
		st.Sysctls[k] = strings.TrimSpace(string(b))
	}
	if st.Links, err = dirNames("/sys/class/net"); err != nil {
		return st, err
	}
	if st.Netns, err = dirNames("/run/netns"); err != nil {
		return st, err
	}
	st.Dirs = map[string]bool{}
	for _, d := range append(slices.Clone(hostDirs), cgroupDirs...) {
		_, err := os.Lstat(d)
		st.Dirs[d] = err == nil
	}
	if st.Processes, err = processesOf(workdir, cgroupName); err != nil {
		return st, err
	}
	st.Listening, err = listeningOn(controlPlanePorts)
	return st, err
}

// dirNames is the sorted names in dir; none when it does not exist.
func dirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// listeningOn lists the host's (this network namespace's) listening TCP
// sockets on ports, as "tcp 2379" or "tcp6 6443". The control plane
// listens in the private network namespace only: one on the host after
// the run is a leftover.
func listeningOn(ports []int) ([]string, error) {
	var found []string
	for _, proto := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join("/proc/net", proto))
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6
			}
			return nil, err
		}
		found = append(found, parseListening(proto, string(b), ports)...)
	}
	slices.Sort(found)
	return slices.Compact(found), nil
}

// parseListening reads /proc/net/tcp{,6} text: the sockets in state 0A
// (LISTEN) whose local port is one of ports.
func parseListening(proto, table string, ports []int) []string {
	var found []string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		var port int
		if _, err := fmt.Sscanf(portHex, "%X", &port); err != nil {
			continue
		}
		if slices.Contains(ports, port) {
			found = append(found, fmt.Sprintf("%s %d", proto, port))
		}
	}
	return found
}

// processesOf lists the processes whose command line mentions workdir or
// whose cgroup path contains cgroupName.
func processesOf(workdir, cgroupName string) ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := fmt.Sprint(os.Getpid())
	var found []string
	for _, e := range entries {
		pid := e.Name()
		if pid == self || pid[0] < '0' || pid[0] > '9' {
			continue
		}
		cmdline, err1 := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		cgroup, err2 := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
		if err1 != nil || err2 != nil {
			continue // gone meanwhile
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		if strings.Contains(cmd, workdir) || strings.Contains(string(cgroup), "/"+cgroupName) {
			found = append(found, pid+" "+cmd)
		}
	}
	return found, nil
}

// LeftoversError lists what a run left on the host.
type LeftoversError struct {
	Items []string
}

func (e *LeftoversError) Error() string {
	return fmt.Sprintf("the run left %d things on the host:\n\t%s", len(e.Items), strings.Join(e.Items, "\n\t"))
}

// compareHost reports every difference between before and after. Mount
// table changes count when they touch a path the run uses (the workdir,
// hostDirs, /proc/sys, /sys/fs/cgroup, a source named for the e2e or
// nodevol): other work on the machine may mount and unmount meanwhile.
func compareHost(before, after hostState, workdir string) error {
	var items []string
	ours := func(m string) bool {
		for _, p := range append([]string{workdir, "/proc/sys", "/sys/fs/cgroup"}, hostDirs...) {
			if strings.HasPrefix(m, p+"/") || strings.HasPrefix(m, p+" ") {
				return true
			}
		}
		return strings.Contains(m, "e2e") || strings.Contains(m, "nodevol")
	}
	for _, m := range after.Mounts {
		if !slices.Contains(before.Mounts, m) && ours(m) {
			items = append(items, "mount: "+m)
		}
	}
	for _, m := range before.Mounts {
		if !slices.Contains(after.Mounts, m) && ours(m) {
			items = append(items, "mount gone: "+m)
		}
	}
	for k, v := range before.Sysctls {
		if after.Sysctls[k] != v {
			items = append(items, fmt.Sprintf("sysctl %s: %s before, %s after", k, v, after.Sysctls[k]))
		}
	}
	for d, existed := range before.Dirs {
		if after.Dirs[d] != existed {
			items = append(items, fmt.Sprintf("directory %s: existed %v before, %v after", d, existed, after.Dirs[d]))
		}
	}
	for _, p := range after.Processes {
		if !slices.Contains(before.Processes, p) {
			items = append(items, "process: "+p)
		}
	}
	for _, l := range after.Listening {
		if !slices.Contains(before.Listening, l) {
			items = append(items, "listening socket: "+l)
		}
	}
	for _, l := range after.Links {
		if !slices.Contains(before.Links, l) {
			items = append(items, "network interface: "+l)
		}
	}
	for _, n := range after.Netns {
		if !slices.Contains(before.Netns, n) {
			items = append(items, "network namespace: /run/netns/"+n)
		}
	}
	if len(items) > 0 {
		return &LeftoversError{Items: items}
	}
	return nil
}

// cgroupRoots are the run's cgroup directories, one per mounted hierarchy
// (cgroup v1, or hybrid: every v1 controller, the named systemd one and
// the unified one, which libcontainer uses too).
func cgroupRoots(name string) ([]string, error) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{filepath.Join("/sys/fs/cgroup", name)}, nil
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter("/sys/fs/cgroup"))
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, m := range mounts {
		if filepath.Dir(m.Mountpoint) == "/sys/fs/cgroup" && (m.FSType == "cgroup" || m.FSType == "cgroup2") {
			roots = append(roots, filepath.Join(m.Mountpoint, name))
		}
	}
	slices.Sort(roots)
	return roots, nil
}

// makeCgroups creates root/sub for every root, with the cpuset's cpus and
// mems copied down (a cpuset cgroup without them cannot hold a task).
func makeCgroups(roots []string, subs []string) error {
	for _, root := range roots {
		dirs := []string{root}
		for _, s := range subs {
			dirs = append(dirs, filepath.Join(root, s))
		}
		for _, d := range dirs {
			if err := os.Mkdir(d, 0o755); err != nil {
				return fmt.Errorf("creating cgroup: %w", err)
			}
			if strings.HasPrefix(root, "/sys/fs/cgroup/cpuset/") {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
					if err != nil {
						return fmt.Errorf("cgroup %s: %w", d, err)
					}
					if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
						return fmt.Errorf("cgroup %s: %w", d, err)
					}
				}
			}
		}
	}
	return nil
}

// removeCgroups removes every directory under each root, bottom-up, and
// the roots. The kernel frees a cgroup asynchronously after its last task
// died, so an rmdir that fails with EBUSY is retried for a few seconds.
func removeCgroups(roots []string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, root := range roots {
			if err := removeTreeOfDirs(root); err != nil {
				left = append(left, err.Error())
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup directories left: %s", strings.Join(left, "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// removeTreeOfDirs rmdirs the directories of a cgroup tree, deepest first
// (cgroupfs directories hold only control files, which rmdir ignores).
func removeTreeOfDirs(root string) error {
	var dirs []string
	stack := []string{root}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		entries, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		dirs = append(dirs, d)
		for _, e := range entries {
			if e.IsDir() {
				stack = append(stack, filepath.Join(d, e.Name()))
			}
		}
	}
	var firstErr error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
