package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// faultResult is one injected fault.
type faultResult struct {
	Plan faultPlan `json:"plan"`
	// At is when it was injected, in seconds since the churn started
	// (later than planned when the one before took long to recover).
	At float64 `json:"at"`
	// Recovery is how long until what it broke served again, in seconds.
	Recovery float64 `json:"recovery"`
	Error    string  `json:"error,omitempty"`
}

// injectFaults injects the schedule's faults, one at a time, each after
// the one before has recovered.
func (s *soak) injectFaults(ctx context.Context) {
	for _, f := range s.sched.Faults {
		if !sleepUntil(ctx, s.start.Add(f.At)) {
			return
		}
		affected := s.nodes
		if f.Node > 0 {
			affected = s.nodes[f.Node-1 : f.Node]
		}
		t0 := time.Now()
		for _, n := range affected {
			n.mu.Lock()
			n.faultStart = t0
			n.mu.Unlock()
		}
		err := s.inject(ctx, f)
		end := time.Now()
		for _, n := range affected {
			n.mu.Lock()
			n.faultStart = time.Time{}
			n.faultEnds = append(n.faultEnds, end)
			n.mu.Unlock()
		}
		res := faultResult{Plan: f, At: t0.Sub(s.start).Seconds(), Recovery: end.Sub(t0).Seconds()}
		where := "the control plane"
		if f.Node > 0 {
			where = s.nodes[f.Node-1].name
		}
		if err != nil {
			res.Error = err.Error()
			s.violate(nil, "", violRecovery, "%s on %s: %v", f.Kind, where, err)
		} else {
			s.log.Printf("fault: %s on %s, recovered in %.1fs", f.Kind, where, res.Recovery)
		}
		s.mu.Lock()
		s.faultsDone = append(s.faultsDone, res)
		s.mu.Unlock()
	}
}

// faultRecoveryLimit is how long a fault may take to recover: beyond the
// kubelet's crash-loop backoff for a container killed several times in a
// row (up to 5 minutes).
const faultRecoveryLimit = 6 * time.Minute

// inject injects one fault and waits until what it broke serves again.
func (s *soak) inject(ctx context.Context, f faultPlan) error {
	if f.Kind == faultAPIServerRestart {
		return s.cp.restartAPIServer(ctx, f.Down)
	}
	n := s.nodes[f.Node-1]
	switch f.Kind {
	case faultKubeletKill:
		n.procMu.Lock()
		defer n.procMu.Unlock()
		n.kubelet.kill()
		sleepFor(ctx, f.Down)
		off, err := n.kubelet.logSize()
		if err != nil {
			return err
		}
		n.startLife(off, time.Now())
		return n.kubelet.start(ctx)
	case faultContainerdRestart:
		n.procMu.Lock()
		defer n.procMu.Unlock()
		n.mu.Lock()
		n.containerdRestarts++
		n.mu.Unlock()
		return n.containerd.restart(ctx)
	case faultCSIKill:
		return s.killCSIDriver(ctx, n)
	case faultExporterRestart:
		return s.restartExporter(ctx, n)
	}
	return fmt.Errorf("fault kind %q", f.Kind)
}

// daemonSet is the manifests' DaemonSet of the name.
func (s *soak) daemonSet(name string) manifestDoc {
	for _, m := range s.dep.daemonSets() {
		if m.Name == name {
			return m
		}
	}
	return manifestDoc{}
}

// The DaemonSets' names in deploy/.
const (
	exporterDaemonSet = "nodevol"
	csiDaemonSet      = "nodevol-csi"
)

// dsPod is the DaemonSet's pod on the node.
func (s *soak) dsPod(ctx context.Context, name string, n *soakNode) (corev1.Pod, error) {
	var pod corev1.Pod
	err := retry(ctx, func() error {
		_, pods, err := s.dep.dsPods(ctx, s.daemonSet(name))
		if err != nil {
			return err
		}
		p, ok := pods[n.name]
		if !ok {
			return fmt.Errorf("%w: no pod of DaemonSet %s on %s", ErrNotFound, name, n.name)
		}
		pod = p
		return nil
	})
	return pod, err
}

// containerPID is the pid (in the run's pid namespace) of the first
// process of the pod's one container, found by its cgroup
// (…/pod<uid>/<container id>).
func containerPID(pod corev1.Pod) (int, error) {
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].ContainerID == "" {
		return 0, fmt.Errorf("pod %s/%s: no container ID yet", pod.Namespace, pod.Name)
	}
	_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
	want := "/pod" + string(pod.UID) + "/" + id + "\n"
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	first := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && strings.Contains(string(b), want) && (first == 0 || pid < first) {
			first = pid
		}
	}
	if first == 0 {
		return 0, fmt.Errorf("pod %s/%s: no process in the cgroup of container %s", pod.Namespace, pod.Name, id)
	}
	return first, nil
}

// restarts is the pod's container's restart count.
func restarts(p corev1.Pod) int32 {
	if len(p.Status.ContainerStatuses) == 0 {
		return 0
	}
	return p.Status.ContainerStatuses[0].RestartCount
}

// killCSIDriver SIGKILLs the node's nodevol-csi process; the kubelet
// restarts its container. Recovered: the container restarted, its pod
// Ready (the driver answers /readyz only once the kubelet registered it)
// and the node's CSINode listing the driver.
func (s *soak) killCSIDriver(ctx context.Context, n *soakNode) error {
	pod, err := s.dsPod(ctx, csiDaemonSet, n)
	if err != nil {
		return err
	}
	pid, err := containerPID(pod)
	if err != nil {
		return err
	}
	before := restarts(pod)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %d (nodevol-csi): %w", pid, err)
	}
	return poll(ctx, faultRecoveryLimit, func() (bool, error) {
		p, err := s.dsPod(ctx, csiDaemonSet, n)
		return err == nil && restarts(p) > before && podReady(p) && s.dep.csiNodeLists(ctx, n.name), nil
	})
}

// restartExporter deletes the node's exporter pod, as an operator
// restarting it does; the DaemonSet controller makes a new one. Recovered:
// the new pod Ready (its first scan done).
func (s *soak) restartExporter(ctx context.Context, n *soakNode) error {
	pod, err := s.dsPod(ctx, exporterDaemonSet, n)
	if err != nil {
		return err
	}
	err = retry(ctx, func() error {
		return s.cp.do(ctx, http.MethodDelete, "/api/v1/namespaces/"+pod.Namespace+"/pods/"+pod.Name, nil, nil)
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return poll(ctx, faultRecoveryLimit, func() (bool, error) {
		p, err := s.dsPod(ctx, exporterDaemonSet, n)
		return err == nil && p.UID != pod.UID && podReady(p), nil
	})
}
