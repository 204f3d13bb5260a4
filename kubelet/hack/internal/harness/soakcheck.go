package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The soak's continuous checks (the exporter's danger gauge and the
// kubelet's failed-unmount counter against what is mounted, resources
// sampled) and its final ones (nothing left after the drain, resources
// back where they started).

// dangerVolumes is the set of a node's volume directories that the
// exporter must report in danger, from the node's mount table and the
// exporter's documented verdicts: a volume with a mount beneath its
// directory (a NAS), other than a CSI volume's own target mount/; and an
// emptyDir with a mount on its directory that nodevol's SetUp did not make
// (its sources are nv-…): the stock kubelet's Memory emptyDirs, which
// nodevol's teardown would refuse, since nothing proves the mount is
// theirs.
func dangerVolumes(mountinfo io.Reader) (map[string]bool, error) {
	danger := map[string]bool{}
	prefix := kubeletRootInNode + "/pods/"
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		point := unescapeMountinfo(fields[4])
		rest, ok := strings.CutPrefix(point, prefix)
		if !ok {
			continue
		}
		// <uid>/volumes/<plugin>/<volume>[/…]
		parts := strings.SplitN(rest, "/", 5)
		if len(parts) < 4 || parts[1] != "volumes" {
			continue
		}
		volDir := prefix + strings.Join(parts[:4], "/")
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+2 >= len(fields) {
			continue
		}
		source := fields[sep+2]
		switch {
		case len(parts) == 4: // on the volume directory
			if parts[2] == emptyDirDir && !strings.HasPrefix(source, "nv-") && !strings.HasPrefix(source, "nodevol-emptydir-") {
				danger[volDir] = true
			}
		case parts[2] == "kubernetes.io~csi" && parts[4] == "mount":
			// the CSI volume's own target
		default:
			danger[volDir] = true
		}
	}
	return danger, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// nodeDanger is the node's danger set now, and a key that changes with it.
func (n *soakNode) nodeDanger() (int, string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", n.holder.Process.Pid))
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	set, err := dangerVolumes(f)
	if err != nil {
		return 0, "", err
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return len(set), strings.Join(keys, "\n"), nil
}

// Danger gauge check timing: compared once what is mounted has been the
// same for dangerSettle, a mismatch that every check (every 2 s) sees for
// dangerBound (two scan intervals and a half: a missed mount-table event
// is caught by the interval scan) is a violation.
const (
	dangerSettle = 5 * time.Second
	dangerBound  = 25 * time.Second
)

// checkDanger compares the exporter's nodevol_scan_danger_volumes on the
// node with the volumes in danger by the node's mount table, whenever it
// has been steady long enough, until ctx ends.
func (s *soak) checkDanger(ctx context.Context, n *soakNode) {
	var key string
	var since, wrongSince time.Time // the key's first sight; the first check of the mismatch under way
	reported := false
	for sleepFor(ctx, 2*time.Second) {
		want, k, err := n.nodeDanger()
		if err != nil {
			continue
		}
		now := time.Now()
		if k != key || since.IsZero() {
			key, since, wrongSince, reported = k, now, time.Time{}, false
		}
		if now.Sub(since) < dangerSettle || n.faultOngoing(now) {
			continue
		}
		// A new exporter (restarted) needs its first scan: Ready.
		pod, err := s.dsPod(ctx, exporterDaemonSet, n)
		if err != nil || !podReady(pod) {
			continue
		}
		m, err := s.dep.agentMetrics(ctx, n.name)
		if err != nil {
			continue
		}
		got := m.value("nodevol_scan_danger_volumes", nil)
		if _, k2, err := n.nodeDanger(); err != nil || k2 != key {
			continue // changed meanwhile
		}
		n.count(func(st *nodeStats) { st.DangerChecks++ })
		switch {
		case got == float64(want):
			wrongSince = time.Time{}
		case wrongSince.IsZero():
			// A scan can catch a volume in the middle of its teardown,
			// which does not change the danger set: wrong until the
			// next scan. Only a mismatch every check sees for
			// dangerBound is the gauge lying.
			wrongSince = now
			n.count(func(st *nodeStats) { st.DangerLagged++ })
		case now.Sub(wrongSince) >= dangerBound && !reported:
			reported = true
			n.count(func(st *nodeStats) { st.DangerMismatches++ })
			s.violate(n, "", violDangerGauge, "nodevol_scan_danger_volumes %g, but %d volumes have been in danger by the mount table for %.0fs, and the gauge has been wrong at every check for %.0fs: [%s]; the exporter's danger series: %s; its log: %s",
				got, want, now.Sub(since).Seconds(), now.Sub(wrongSince).Seconds(), strings.ReplaceAll(key, "\n", ", "), dangerSeries(m), s.exporterUnhealthy(ctx, pod))
		}
	}
}

// The kubelet's metric for failed unmounts labels a CSI volume's plugin
// with its driver; its log names the plugin alone.
const (
	emptyDirPlugin = "kubernetes.io/empty-dir"
	csiPlugin      = "kubernetes.io/csi"
)

// checkUnmountCounter compares, every 20 s, the kubelet's failed-unmount
// counter (storage_operation_duration_seconds_count, volume_unmount,
// fail-unknown) of emptyDir and of nodevol-csi with the failed TearDowns
// the same kubelet process logged: the counter is incremented before the
// line is logged, so it must be at least the lines read before the
// scrape, and at most the lines read 2 s after it.
func (s *soak) checkUnmountCounter(ctx context.Context, n *soakNode) {
	logPlugins := []string{emptyDirPlugin, csiPlugin}
	metricPlugins := []string{emptyDirPlugin, csiPlugin + ":" + s.driver}
	for sleepFor(ctx, 20*time.Second) {
		if n.faultOngoing(time.Now()) {
			continue
		}
		n.procMu.Lock()
		s.readLog(n)
		before, life := n.failedInLife()
		m, err := n.kubelet.failedUnmounts(ctx, metricPlugins...)
		sleepFor(ctx, 2*time.Second)
		s.readLog(n)
		after, life2 := n.failedInLife()
		n.procMu.Unlock()
		if err != nil || life != life2 {
			continue
		}
		n.count(func(st *nodeStats) { st.UnmountCounterChecks++ })
		for i, p := range logPlugins {
			if m[i] < float64(before[p]) || m[i] > float64(after[p]) {
				n.count(func(st *nodeStats) { st.UnmountCounterMismatches++ })
				s.violate(n, "", violUnmountCounter, "%s: the kubelet's counter says %g failed unmounts; its log shows %d before the scrape and %d after", p, m[i], before[p], after[p])
			}
		}
	}
}

// failedInLife is the current kubelet process's failed TearDowns by
// plugin, as logged, and which process it is.
func (n *soakNode) failedInLife() (map[string]int, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := len(n.lives) - 1
	out := map[string]int{}
	for k, v := range n.lives[i].failed {
		out[k] = v
	}
	return out, i
}

// resourceSample is one component's resources at one moment.
type resourceSample struct {
	At         float64 `json:"at"`      // seconds since the churn started; negative: before
	Churned    int     `json:"churned"` // pods created so far, on every node
	Live       int     `json:"live"`    // the soak's pods on the node, created and not yet gone
	Node       string  `json:"node"`
	Component  string  `json:"component"` // kubelet, nodevol-csi, exporter
	PID        int     `json:"pid"`
	RSS        int64   `json:"rss"` // bytes
	FDs        int     `json:"fds"`
	Threads    int     `json:"threads"`
	Goroutines int     `json:"goroutines"` // go_goroutines from its /metrics; -1: not exported
	Phase      string  `json:"phase,omitempty"`
}

// The components sampled.
const (
	compKubelet  = "kubelet"
	compCSI      = "nodevol-csi"
	compExporter = "exporter"
)

// sampleResources samples every SampleEvery until ctx ends.
func (s *soak) sampleResources(ctx context.Context) {
	s.sampleOnce(ctx)
	for sleepFor(ctx, s.in.SampleEvery) {
		s.sampleOnce(ctx)
	}
}

// sampleOnce samples the kubelets, the nodevol-csi drivers and the
// exporters once.
func (s *soak) sampleOnce(ctx context.Context) {
	at := time.Since(s.start).Seconds()
	churned := 0
	for _, n := range s.nodes {
		n.count(func(st *nodeStats) { churned += st.PodsCreated })
	}
	client := &http.Client{Timeout: 3 * time.Second}
	for _, n := range s.nodes {
		live := 0
		n.count(func(st *nodeStats) { live = st.PodsCreated - st.PodsGone })
		// metricsOf scrapes a component: the kubelet's read-only port,
		// the agents' secure /metrics (componentMetrics).
		add := func(comp string, pid int, metricsOf func() (metrics, error)) {
			smp := resourceSample{At: at, Churned: churned, Live: live, Node: n.name, Component: comp, PID: pid, Goroutines: -1}
			if err := procResources(pid, &smp); err != nil {
				return
			}
			if m, err := metricsOf(); err == nil && m.count("go_goroutines", nil) == 1 {
				smp.Goroutines = int(m.value("go_goroutines", nil))
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
		n.procMu.Lock()
		kubeletURL := n.kubelet.url(readOnlyPort, "/metrics")
		add(compKubelet, n.kubelet.cmd.Process.Pid, func() (metrics, error) { return scrape(ctx, client, kubeletURL) })
		n.procMu.Unlock()
		for _, c := range []struct{ comp, ds string }{{compCSI, csiDaemonSet}, {compExporter, exporterDaemonSet}} {
			_, pods, err := s.dep.dsPods(ctx, s.daemonSet(c.ds))
			if err != nil {
				continue
			}
			p, ok := pods[n.name]
			if !ok || p.Status.PodIP == "" {
				continue
			}
			pid, err := containerPID(p)
			if err != nil {
				continue
			}
			add(c.comp, pid, func() (metrics, error) { return s.dep.componentMetrics(ctx, c.ds, n.name) })
		}
	}
}

// procResources reads a process's RSS and threads (/proc/<pid>/status)
// and its open descriptors (/proc/<pid>/fd).
func procResources(pid int, smp *resourceSample) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			smp.RSS = n << 10
		case "Threads":
			smp.Threads = int(n)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return err
	}
	smp.FDs = len(fds)
	return nil
}

// growth is one component's resources at the start of the churn (or of
// the process that was running at the end, when one was restarted) and
// after the drain.
type growth struct {
	Node       string   `json:"node"`
	Component  string   `json:"component"`
	From       string   `json:"from"` // what the start is
	RSS        [2]int64 `json:"rss"`
	FDs        [2]int   `json:"fds"`
	Goroutines [2]int   `json:"goroutines"`
	Churned    int      `json:"churned"` // pods created between the two
	OK         bool     `json:"ok"`
	Why        string   `json:"why,omitempty"`
}

// Resource growth limits, from the start to after the drain (the same
// number of the soak's pods on the node: none): more is a leak that grows
// with the pods churned. Each is the larger of an absolute and a relative
// allowance (the Go heap's and the kernel's slack).
const (
	rssGrowthBytes  = 32 << 20
	fdGrowth        = 32
	goroutineGrowth = 100
	growthRelative  = 0.3
)

// growthOf compares a component's samples: the last one (after the
// drain) with the first of the same process (before the churn when it
// lived that long), or its smallest when it started during the churn.
func growthOf(samples []resourceSample) (growth, bool) {
	if len(samples) < 2 {
		return growth{}, false
	}
	last := samples[len(samples)-1]
	g := growth{Node: last.Node, Component: last.Component}
	var first *resourceSample
	restarted := false
	for i := range samples[:len(samples)-1] {
		smp := &samples[i]
		if smp.PID != last.PID {
			restarted = true
			continue
		}
		switch {
		case first == nil:
			first = smp
		case restarted && smp.RSS < first.RSS:
			first = smp
		}
	}
	if first == nil {
		return growth{}, false
	}
	if restarted {
		g.From = fmt.Sprintf("its smallest sample since its restart (pid %d, first seen at %.0fs)", last.PID, first.At)
	} else {
		g.From = "before the churn"
	}
	g.RSS = [2]int64{first.RSS, last.RSS}
	g.FDs = [2]int{first.FDs, last.FDs}
	g.Goroutines = [2]int{first.Goroutines, last.Goroutines}
	g.Churned = last.Churned - first.Churned
	allow := func(from, abs float64) float64 { return max(abs, growthRelative*from) }
	var why []string
	if d := float64(last.RSS - first.RSS); d > allow(float64(first.RSS), rssGrowthBytes) {
		why = append(why, fmt.Sprintf("RSS grew by %.1f MiB", d/(1<<20)))
	}
	if d := float64(last.FDs - first.FDs); d > allow(float64(first.FDs), fdGrowth) {
		why = append(why, fmt.Sprintf("open descriptors grew by %.0f", d))
	}
	if first.Goroutines >= 0 && last.Goroutines >= 0 {
		if d := float64(last.Goroutines - first.Goroutines); d > allow(float64(first.Goroutines), goroutineGrowth) {
			why = append(why, fmt.Sprintf("goroutines grew by %.0f", d))
		}
	}
	g.OK, g.Why = len(why) == 0, strings.Join(why, "; ")
	return g, true
}

// checkGrowth compares each component's resources after the drain with
// the start.
func (s *soak) checkGrowth() []growth {
	var out []growth
	for _, n := range s.nodes {
		for _, comp := range []string{compKubelet, compCSI, compExporter} {
			var mine []resourceSample
			s.mu.Lock()
			for _, smp := range s.samples {
				if smp.Node == n.name && smp.Component == comp {
					mine = append(mine, smp)
				}
			}
			s.mu.Unlock()
			g, ok := growthOf(mine)
			if !ok {
				continue
			}
			if !g.OK {
				s.violate(n, "", violResources, "%s: %s from %s to after the drain, with %d pods churned", comp, g.Why, g.From, g.Churned)
			}
			out = append(out, g)
		}
	}
	return out
}

// drainDaemonSets deletes the exporter's and nodevol-csi's DaemonSets
// (after every pod of the soak is gone: nodevol-csi tears their volumes
// down) and waits until their pods are gone from the API and the nodes.
func (s *soak) drainDaemonSets(ctx context.Context) {
	for _, m := range s.dep.daemonSets() {
		err := retry(ctx, func() error {
			return s.cp.do(ctx, http.MethodDelete, "/apis/apps/v1/namespaces/"+m.Namespace+"/daemonsets/"+m.Name, nil, nil)
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			s.violate(nil, "", violLeak, "deleting DaemonSet %s/%s: %v", m.Namespace, m.Name, err)
		}
	}
	err := poll(ctx, 3*time.Minute, func() (bool, error) {
		for _, m := range s.dep.daemonSets() {
			var list corev1.PodList
			if err := s.cp.get(ctx, "/api/v1/namespaces/"+m.Namespace+"/pods", &list); err != nil || len(list.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s.violate(nil, "", violLiveness, "the DaemonSets' pods were not gone from the API 3 minutes after the DaemonSets' deletion: %v", err)
	}
	for _, n := range s.nodes {
		err := poll(ctx, 2*time.Minute, func() (bool, error) {
			ents, err := os.ReadDir(filepath.Join(n.kubelet.root, "pods"))
			return err == nil && len(ents) == 0, nil
		})
		if err != nil {
			s.log.Printf("%s: pod directories still there 2 minutes after the drain", n.name)
		}
	}
}

// kubeletSockets are the sockets the kubelet itself keeps under its root
// while it runs.
var kubeletSockets = []string{"device-plugins/kubelet.sock", "pod-resources/kubelet.sock", "pods-api/pods-api.sock"}

// checkLeaks looks, on every node after the drain, for anything a pod or
// the DaemonSets left: pod directories, mounts below the kubelet root,
// sockets under it but the kubelet's own, quota projects in nodevol-csi's
// bookkeeping, pods' cgroups, containers' processes and shims,
// containers and sandboxes containerd still has, and pod addresses the
// CNI plugin still holds.
func (s *soak) checkLeaks(ctx context.Context) {
	for _, n := range s.nodes {
		var leaks, orphans []string
		// Containers of deleted pods are removed by the kubelet's garbage
		// collection (every minute); give it two rounds.
		err := poll(ctx, 150*time.Second, func() (bool, error) {
			leaks, orphans = n.leaks(ctx, s.driver)
			return len(leaks) == 0, nil
		})
		for _, o := range orphans {
			s.log.Printf("%s: containerd's orphan, left by its restart: %s", n.name, o)
		}
		n.count(func(st *nodeStats) { st.ContainerdOrphans = orphans })
		if err == nil {
			s.log.Printf("%s: nothing left after the drain", n.name)
			continue
		}
		for _, l := range leaks {
			s.violate(n, "", violLeak, "%s", l)
		}
	}
}

// leaks is what the node has left that it should not, and the shims
// containerd orphaned when it was restarted while it started them
// (containerd's own leak, which the soak counts apart).
func (n *soakNode) leaks(ctx context.Context, driver string) (out, orphans []string) {
	root := n.kubelet.root
	if ents, err := os.ReadDir(filepath.Join(root, "pods")); err != nil || len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		out = append(out, fmt.Sprintf("pod directories %v %v", names, err))
	}
	if ms, err := n.mountsUnder(kubeletRootInNode); err != nil || len(ms) > 0 {
		out = append(out, fmt.Sprintf("mounts below the kubelet root %v %v", ms, err))
	}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSocket == 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !slices.Contains(kubeletSockets, rel) {
			out = append(out, "socket "+rel)
		}
		return nil
	})
	projects := filepath.Join(root, "plugins", driver, "projects")
	if b, err := os.ReadFile(projects); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		out = append(out, fmt.Sprintf("quota projects in nodevol-csi's %s: %q", projects, strings.TrimSpace(string(b))))
	}
	cgroupRoot := strings.TrimPrefix(n.kubelet.cgroupRoot, "/")
	if dirs, err := cgroupDirs(); err == nil {
		for _, d := range dirs {
			_ = filepath.WalkDir(filepath.Join(d, cgroupRoot), func(path string, e fs.DirEntry, err error) error {
				if err == nil && e.IsDir() && strings.HasPrefix(e.Name(), "pod") {
					out = append(out, "cgroup "+path)
					return filepath.SkipDir
				}
				return nil
			})
		}
	}
	ids, ctrErr := n.containerd.ctrOutput(ctx, "-n", "k8s.io", "containers", "ls", "-q")
	if ctrErr != nil || strings.TrimSpace(ids) != "" {
		out = append(out, fmt.Sprintf("containerd containers %q %v", strings.Fields(ids), ctrErr))
	}
	n.mu.Lock()
	containerdRestarted := n.containerdRestarts > 0
	n.mu.Unlock()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cg, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		cmd, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err1 != nil || err2 != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		cmdline := strings.Join(args, " ")
		shim := strings.Contains(cmdline, "containerd-shim") && strings.Contains(cmdline, n.containerd.socket)
		switch {
		case processZombie(e.Name()):
			// Exited, not yet reaped by its parent: it holds nothing but
			// its process ID, and the host check at the end of the run
			// still finds any process the namespace's end did not take.
			continue
		case shim && containerdRestarted && ctrErr == nil && !slices.Contains(strings.Fields(ids), flagValue(args, "-id")):
			// containerd 1.6 restarted while it started this sandbox's
			// shim: the new containerd stopped and removed the sandbox
			// but never knew the shim. containerd's leak, not the
			// kubelet's or nodevol's: counted apart.
			orphans = append(orphans, "process "+e.Name()+" "+cmdline)
		case shim || strings.Contains(string(cg), "/"+cgroupRoot+"/kubepods/"):
			out = append(out, "process "+e.Name()+" "+cmdline)
		}
	}
	ipam := filepath.Join(n.dir, "cni", "ipam", cniNetworkName)
	if ents, err := os.ReadDir(ipam); err == nil {
		for _, e := range ents {
			if e.Name() != "lock" && !strings.HasPrefix(e.Name(), "last_reserved_ip") {
				out = append(out, "pod address held by host-local: "+e.Name())
			}
		}
	}
	return out, orphans
}

// flagValue is the value of the flag name in a command's arguments ("" when
// it has none).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// cgroupDirs are the mounted cgroup hierarchies' directories.
func cgroupDirs() ([]string, error) {
	roots, err := cgroupRoots("x")
	if err != nil {
		return nil, err
	}
	for i := range roots {
		roots[i] = filepath.Dir(roots[i])
	}
	return roots, nil
}

// dangerSeries is the exporter's nodevol_scan_volumes series of verdict
// danger.
func dangerSeries(m metrics) string {
	var parts []string
	for _, smp := range m.matching("nodevol_scan_volumes", map[string]string{"verdict": "danger"}) {
		if v := sampleValue(smp, ""); v != 0 {
			var ls []string
			for _, l := range smp.GetLabel() {
				if l.GetName() == "plugin" || l.GetName() == "reason" {
					ls = append(ls, l.GetValue())
				}
			}
			parts = append(parts, fmt.Sprintf("%s %g", strings.Join(ls, " "), v))
		}
	}
	return strings.Join(parts, ", ")
}

// exporterUnhealthy is the exporter's last log lines about volumes that
// are not healthy.
func (s *soak) exporterUnhealthy(ctx context.Context, pod corev1.Pod) string {
	log, err := s.cp.text(ctx, "/api/v1/namespaces/"+pod.Namespace+"/pods/"+pod.Name+"/log?tailLines=400")
	if err != nil {
		return err.Error()
	}
	// The last line of each volume (a scan logs every unhealthy volume
	// each time), at most 6 volumes.
	var lines []string
	last := map[string]int{}
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "not healthy") {
			continue
		}
		_, path, _ := strings.Cut(l, " path=")
		path, _, _ = strings.Cut(path, " ")
		if i, ok := last[path]; ok {
			lines[i] = l
			continue
		}
		last[path] = len(lines)
		lines = append(lines, l)
	}
	if len(lines) > 6 {
		lines = lines[len(lines)-6:]
	}
	return strings.Join(lines, " | ")
}

// processZombie says whether the process pid has exited and waits for its
// parent to reap it (state Z in /proc/<pid>/stat).
func processZombie(pid string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and
	// may itself hold ") ".
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
