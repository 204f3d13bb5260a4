package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// soak is one soak run, inside the namespace.
type soak struct {
	in     *soakInputs
	cp     *controlPlane
	nodes  []*soakNode
	dep    *deployRun // the exporter's and nodevol-csi's DaemonSets
	driver string     // nodevol-csi's CSIDriver name
	sched  soakSchedule
	pods   *podCache
	dir    string // the soak's scratch directory (bind NAS sources)
	log    *logger
	start  time.Time // the churn's

	mu         sync.Mutex
	runs       map[string]*podRun // by pod UID
	faultsDone []faultResult
	violations []violation
	samples    []resourceSample
}

// violation is an invariant the run broke: each fails the run.
type violation struct {
	At     float64 `json:"at"` // seconds since the churn started
	Node   string  `json:"node,omitempty"`
	Pod    string  `json:"pod,omitempty"`
	Kind   string  `json:"kind"`
	Detail string  `json:"detail"`
}

// Violation kinds.
const (
	violBytesLost      = "bytes lost"
	violLeak           = "leak"
	violLiveness       = "liveness"
	violResources      = "resources grow"
	violDangerGauge    = "danger gauge"
	violUnmountCounter = "failed-unmount counter"
	violUnexplained    = "teardown failed without a NAS or a fault"
	violRecovery       = "fault not recovered"
)

// violate records a violation and logs it at once.
func (s *soak) violate(node *soakNode, pod, kind, format string, args ...any) {
	v := violation{At: time.Since(s.start).Seconds(), Pod: pod, Kind: kind, Detail: fmt.Sprintf(format, args...)}
	if node != nil {
		v.Node = node.name
	}
	s.mu.Lock()
	s.violations = append(s.violations, v)
	s.mu.Unlock()
	s.log.Printf("VIOLATION (%s) %s %s: %s", v.Kind, v.Node, v.Pod, v.Detail)
}

// runSoak is the namespace's PID 1 in the soak mode.
func runSoak(ctx context.Context, cfg innerConfig, log *logger) (*soakResult, error) {
	in := cfg.Soak
	cp, err := startClusterControlPlane(ctx, cfg.Workdir, cfg.Apiserver, cfg.Cluster, log)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	s := &soak{in: in, cp: cp, dir: filepath.Join(cfg.Workdir, "soak"), log: log, runs: map[string]*podRun{}}
	defer func() {
		for _, n := range s.nodes {
			n.stop()
		}
	}()
	for i, name := range in.Kubelets {
		f := parseFlavor(name)
		n, err := startClusterNode(ctx, cp, nodeSpec{
			index: i + 1, flavor: f, kubeletBin: cfg.Kubelets[name],
			dir:    filepath.Join(cfg.Workdir, name, fmt.Sprintf("node-%d", i+1)),
			images: cfg.Images, cgroupRoot: fmt.Sprintf("/%s/%s/node-%d", cfg.CgroupName, name, i+1),
		}, log.with(fmt.Sprintf("node %d: ", i+1)))
		if err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, newSoakNode(n, f, cfg.Versions[name]))
	}
	var nodes []*clusterNode
	for _, n := range s.nodes {
		nodes = append(nodes, n.clusterNode)
	}
	s.dep = &deployRun{cp: cp, nodes: nodes, in: cfg.Deploy, log: log}
	if err := s.setUp(ctx); err != nil {
		return nil, err
	}
	return s.run(ctx)
}

// setUp applies deploy/ (the exporter and nodevol-csi, through the API,
// as an operator does), waits until both run on every node, and creates
// the soak's namespace, Secret and ConfigMap.
func (s *soak) setUp(ctx context.Context) error {
	var o outcome
	s.dep.apply(ctx, &o)
	if len(o.failures) == 0 {
		s.dep.daemonSetsReady(ctx, &o)
	}
	if len(o.failures) > 0 {
		return fmt.Errorf("deploy/ did not come up: %v", o.failures)
	}
	s.driver = s.dep.driver
	s.log.Printf("deploy/ applied: %v", o.observed)
	if err := s.cp.ensureNamespace(ctx, soakNamespace); err != nil {
		return err
	}
	for _, obj := range []struct {
		path string
		v    any
	}{
		{"/api/v1/namespaces/" + soakNamespace + "/secrets", &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: soakSecret, Namespace: soakNamespace}, StringData: map[string]string{"password": "soak", "user": "nodevol"}}},
		{"/api/v1/namespaces/" + soakNamespace + "/configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: soakConfigMap, Namespace: soakNamespace}, Data: map[string]string{"setting": "on", "other": "off"}}},
	} {
		if err := s.cp.do(ctx, http.MethodPost, obj.path, obj.v, nil); err != nil && !errors.Is(err, ErrExists) {
			return err
		}
	}
	// The controller manager makes the namespace's default ServiceAccount
	// (the projected token's) and publishes kube-root-ca.crt.
	err := poll(ctx, time.Minute, func() (bool, error) {
		var sa corev1.ServiceAccount
		var cm corev1.ConfigMap
		return s.cp.get(ctx, "/api/v1/namespaces/"+soakNamespace+"/serviceaccounts/default", &sa) == nil &&
			s.cp.get(ctx, "/api/v1/namespaces/"+soakNamespace+"/configmaps/kube-root-ca.crt", &cm) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s: no default ServiceAccount or kube-root-ca.crt: %w", soakNamespace, err)
	}
	// HugePages volumes when every node has pages to give.
	s.in.Params.HugePages = true
	for _, n := range s.nodes {
		var node corev1.Node
		if err := s.cp.get(ctx, "/api/v1/nodes/"+n.name, &node); err != nil {
			return err
		}
		q, ok := node.Status.Allocatable[hugePageResource]
		if !ok || q.Value() < 4<<20 {
			s.in.Params.HugePages = false
		}
	}
	if s.sched, err = makeSchedule(s.in.Params); err != nil {
		return err
	}
	if b, err := json.MarshalIndent(s.sched, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(s.dir, "..", "soak-schedule.json"), b, 0o644)
	}
	s.log.Printf("schedule (seed %d): %d pods over %v on %d nodes, %d faults; HugePages volumes: %v", s.in.Params.Seed, len(s.sched.Pods), s.in.Params.Duration, len(s.nodes), len(s.sched.Faults), s.in.Params.HugePages)
	if s.pods, err = newPodCache(s.cp, soakNamespace); err != nil {
		return err
	}
	return os.MkdirAll(s.dir, 0o755)
}

// run churns, injects the faults, checks as it goes, drains, and checks
// what is left.
func (s *soak) run(ctx context.Context) (*soakResult, error) {
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	var bgWG sync.WaitGroup
	bgWG.Go(func() { s.pods.run(bg) })
	bgWG.Go(func() { reapOrphans(bg) })
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		s.pods.mu.Lock()
		defer s.pods.mu.Unlock()
		return s.pods.synced, nil
	}); err != nil {
		return nil, fmt.Errorf("the soak's pod watch: %w", err)
	}
	s.start = time.Now()
	for _, n := range s.nodes {
		n.startLife(0, s.start) // the kubelet's log began with it
		bgWG.Go(func() { s.followLog(bg, n) })
		bgWG.Go(func() { s.checkDanger(bg, n) })
		bgWG.Go(func() { s.checkUnmountCounter(bg, n) })
	}
	bgWG.Go(func() { s.sampleResources(bg) })
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); s.injectFaults(ctx) }()
	var podsWG sync.WaitGroup
	for _, p := range s.sched.Pods {
		podsWG.Go(func() { s.runPod(ctx, p) })
	}
	s.log.Printf("churn: %d pods planned over %v", len(s.sched.Pods), s.in.Params.Duration)
	<-faultsDone
	podsWG.Wait()
	churned := time.Since(s.start)
	s.log.Printf("every pod of the schedule is gone after %.0fs", churned.Seconds())
	// One more look at the logs before the checks stop.
	for _, n := range s.nodes {
		s.readLog(n)
	}
	stopBG()
	bgWG.Wait()
	s.sampleOnce(context.Background()) // the drained state's resources
	t0 := time.Now()
	s.drainDaemonSets(ctx)
	s.checkLeaks(ctx)
	res := s.result(churned, time.Since(t0))
	return res, nil
}

// soakNode is one node of the soak: its kubelet's lives (each SIGKILL
// starts a new one), its log, and its NAS mounts.
type soakNode struct {
	*clusterNode
	flavor  flavor
	version string
	follow  logFollower

	// procMu is held by a restart of the kubelet or containerd, and by
	// what reads their processes.
	procMu sync.Mutex
	logMu  sync.Mutex // one reader of the log at a time

	statsMu sync.Mutex
	stats   nodeStats

	mu         sync.Mutex
	lives      []kubeletLife
	faultStart time.Time   // of the fault under way on this node (or the API server); zero: none
	faultEnds  []time.Time // when each fault on this node (or the API server) ended
	// containerdRestarts is how many times containerd was restarted.
	containerdRestarts int
}

// kubeletLife is one kubelet process.
type kubeletLife struct {
	offset int64     // the log's size when it started
	start  time.Time // when it started
	failed map[string]int
}

func newSoakNode(n *clusterNode, f flavor, version string) *soakNode {
	sn := &soakNode{clusterNode: n, flavor: f, version: version, follow: logFollower{path: n.kubelet.logPath}}
	sn.stats.init()
	return sn
}

// startLife records that a kubelet process started at t, its log lines
// from offset on.
func (n *soakNode) startLife(offset int64, t time.Time) {
	off := offset
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lives = append(n.lives, kubeletLife{offset: off, start: t, failed: map[string]int{}})
}

// lifeAt is the index of the life a log line at offset belongs to; n.mu
// is held.
func (n *soakNode) lifeAt(offset int64) int {
	i := len(n.lives) - 1
	for i > 0 && n.lives[i].offset > offset {
		i--
	}
	return i
}

// lastFaultEnd is the end of the last fault on the node (or the API
// server) before t, or the zero time.
func (n *soakNode) lastFaultEnd(t time.Time) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	var last time.Time
	for _, e := range n.faultEnds {
		if e.Before(t) && e.After(last) {
			last = e
		}
	}
	return last
}

// followLog reads the node's kubelet log every 100 ms until ctx ends.
func (s *soak) followLog(ctx context.Context, n *soakNode) {
	for {
		s.readLog(n)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readLog handles the lines the kubelet logged since the last read.
func (s *soak) readLog(n *soakNode) {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	year := time.Now().Year()
	err := n.follow.next(func(line string, offset int64) {
		if ev, ok := parseVolumeLine(line, year); ok {
			ev.Offset = offset
			s.onVolumeEvent(n, ev)
		}
	})
	if err != nil {
		s.log.Printf("note: reading %s: %v", n.follow.path, err)
	}
}

// onVolumeEvent counts a volume line and hands it to its pod's run.
func (s *soak) onVolumeEvent(n *soakNode, ev volumeEvent) {
	s.mu.Lock()
	r := s.runs[ev.UID]
	s.mu.Unlock()
	if ev.Kind == eventTearDownFailed {
		n.mu.Lock()
		n.lives[n.lifeAt(ev.Offset)].failed[ev.Plugin]++
		n.mu.Unlock()
	}
	if r == nil {
		return // a DaemonSet's pod
	}
	t, ok := typeOfVolume(ev.Volume)
	if !ok {
		return
	}
	switch ev.Kind {
	case eventMountStarted:
		r.setUpStarted()
	case eventSetUp:
		n.count(func(st *nodeStats) { st.Volumes[t].SetUp++ })
		r.setUpDone(ev.Volume, ev.Time)
	case eventTearDown:
		n.count(func(st *nodeStats) { st.Volumes[t].TornDown++ })
		r.afterTearDown(s, t, ev)
	case eventTearDownFailed:
		n.count(func(st *nodeStats) { st.Volumes[t].TearDownFailed++ })
		r.afterTearDown(s, t, ev)
	}
}

// podRun is one pod of the schedule, from its creation until it is gone.
type podRun struct {
	plan podPlan
	node *soakNode
	uid  string

	mu          sync.Mutex
	started     chan struct{} // closed when the kubelet starts mounting its volumes
	startedOnce sync.Once
	setUp       map[string]time.Time // volume → SetUp succeeded (the kubelet's time)
	nas         *nodeNAS
	nasType     volumeType
	nasLost     map[string]bool // sentinel paths found lost
	unmountedAt time.Time
}

func (r *podRun) setUpStarted() { r.startedOnce.Do(func() { close(r.started) }) }

func (r *podRun) setUpDone(vol string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.setUp[vol]; !ok {
		r.setUp[vol] = t
	}
}

// afterTearDown checks the NAS's sentinels after a TearDown attempt of
// one of the pod's volumes, and accounts for a failed attempt: it must be
// explained by the NAS in that volume or by a fault.
func (r *podRun) afterTearDown(s *soak, t volumeType, ev volumeEvent) {
	r.mu.Lock()
	nasHere := r.nas != nil && r.nasType == t
	mounted := nasHere && r.nas.mounted
	justUnmounted := nasHere && !r.unmountedAt.IsZero() && ev.Time.Sub(r.unmountedAt) < 5*time.Second
	r.mu.Unlock()
	if nasHere {
		s.checkSentinels(r, "after a TearDown "+map[bool]string{true: "that failed", false: "that succeeded"}[ev.Kind == eventTearDownFailed])
	}
	if ev.Kind == eventTearDown && mounted {
		s.violate(r.node, r.plan.name(), violUnexplained, "volume %s (%s): TearDown succeeded while the NAS was mounted inside it", ev.Volume, t)
	}
	if ev.Kind != eventTearDownFailed {
		return
	}
	n := r.node
	switch end := n.lastFaultEnd(ev.Time.Add(time.Second)); {
	case mounted || justUnmounted:
		n.count(func(st *nodeStats) { st.FailedNAS++ })
	case !end.IsZero() && ev.Time.Sub(end) < faultAftermath || n.faultOngoing(ev.Time):
		n.count(func(st *nodeStats) { st.FailedFault++ })
	case strings.Contains(ev.Error, "device or resource busy"):
		// The kernel refused to unmount the volume's own filesystem
		// because a mount namespace held it (a propagated copy in use,
		// for a moment): nothing is lost and the kubelet tries again;
		// whether the volume then goes is the liveness check's. Counted
		// apart and logged, not a violation.
		n.count(func(st *nodeStats) { st.FailedBusy++ })
		s.log.Printf("%s %s: volume %s (%s): TearDown refused by the kernel for now: %s", n.name, r.plan.name(), ev.Volume, t, ev.Error)
	default:
		n.count(func(st *nodeStats) { st.FailedUnexplained++ })
		s.violate(n, r.plan.name(), violUnexplained, "volume %s (%s): %s", ev.Volume, t, ev.Error)
	}
}

// faultAftermath is how long after a fault a failed TearDown is put down
// to it: the kubelet's retry backoff (up to 2m2s) and a driver's
// re-registration.
const faultAftermath = 150 * time.Second

// checkSentinels reads every sentinel file of the pod's NAS while it is
// mounted, and accounts for the ones lost.
func (s *soak) checkSentinels(r *podRun, when string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nas == nil || !r.nas.mounted {
		return
	}
	lost, _ := r.nas.lost()
	s.accountLoss(r, lost, when)
}

// accountLoss records the sentinel files newly found lost; r.mu is held.
func (s *soak) accountLoss(r *podRun, lost []string, when string) {
	n := r.node
	n.count(func(st *nodeStats) {
		st.SentinelChecks += len(r.nas.files)
		st.NASChecks++
	})
	var newly []string
	var bytes int64
	for _, p := range lost {
		if r.nasLost[p] {
			continue
		}
		r.nasLost[p] = true
		newly = append(newly, p)
		for _, f := range r.nas.files {
			if f.path == p {
				bytes += int64(f.size)
			}
		}
	}
	if len(newly) == 0 {
		return
	}
	// The stock kubelet's emptyDir losing the NAS is the peer's figure;
	// anything else losing a byte breaks nodevol's promise.
	peer := n.flavor == stockKubelet && !csiVolume(r.nasType)
	n.count(func(st *nodeStats) {
		st.FilesLost += len(newly)
		st.BytesLost += bytes
		st.BytesLostByType[r.nasType] += bytes
	})
	if peer {
		s.log.Printf("%s %s: the stock kubelet's emptyDir lost %d sentinel files (%d bytes) of the NAS in %s %s (the peer's figure)", n.name, r.plan.name(), len(newly), bytes, r.nasType, when)
		return
	}
	s.violate(n, r.plan.name(), violBytesLost, "%d sentinel files (%d bytes) of the %s NAS in volume %s (%s) lost or changed %s: %v", len(newly), bytes, r.nas.kind, volumeName[r.nasType], r.nasType, when, newly)
}

// runPod runs one pod of the schedule: create it, wait until it runs,
// mount its NAS, delete it, unmount the NAS after its hold, and wait until
// it is gone from the API and the node.
func (s *soak) runPod(ctx context.Context, p podPlan) {
	if !sleepUntil(ctx, s.start.Add(p.At)) {
		return
	}
	n := s.nodes[p.Node-1]
	r := &podRun{plan: p, node: n, started: make(chan struct{}), setUp: map[string]time.Time{}, nasLost: map[string]bool{}}
	pod := soakPod(p, s.driver)
	var created corev1.Pod
	logOffset, _ := n.kubelet.logSize() // where a pod deleted in its SetUp looks for its first line
	tCreate := time.Now()
	err := retry(ctx, func() error {
		err := s.cp.do(ctx, http.MethodPost, "/api/v1/namespaces/"+soakNamespace+"/pods", pod, &created)
		if errors.Is(err, ErrExists) { // created by an attempt whose answer was lost
			return s.cp.get(ctx, "/api/v1/namespaces/"+soakNamespace+"/pods/"+p.name(), &created)
		}
		return err
	})
	if err != nil {
		s.violate(n, p.name(), violLiveness, "could not create the pod through the API for %v: %v", apiRetryLimit, err)
		return
	}
	r.uid = string(created.UID)
	s.mu.Lock()
	s.runs[r.uid] = r
	s.mu.Unlock()
	n.count(func(st *nodeStats) {
		st.PodsCreated++
		for _, t := range p.Volumes {
			st.Volumes[t].Planned++
		}
		if p.SubPath {
			st.Volumes[volSubPath].Planned++
		}
	})

	if p.DeleteInSetUp {
		s.deleteInSetUp(ctx, r, logOffset)
		return
	}
	// Running, within the bound after its creation or the end of a fault.
	var ranAt time.Time
	for ranAt.IsZero() {
		seen, _ := s.pods.get(p.name())
		if seen.Running {
			ranAt = seen.RanAt
			break
		}
		since := tCreate
		if e := n.lastFaultEnd(time.Now()); e.After(since) {
			since = e
		}
		if time.Since(since) > s.in.RunBound {
			s.violate(n, p.name(), violLiveness, "not Running %v after its creation or the last fault (phase %s)", s.in.RunBound, seen.Phase)
			break
		}
		if !sleepFor(ctx, 100*time.Millisecond) {
			return
		}
	}
	if !ranAt.IsZero() {
		n.count(func(st *nodeStats) {
			st.PodsRan++
			st.CreationToRunning = append(st.CreationToRunning, ranAt.Sub(tCreate).Seconds())
			if p.SubPath {
				st.Volumes[volSubPath].SetUp++
			}
		})
		if p.NAS != nil {
			s.mountNAS(ctx, r)
		}
		sleepFor(ctx, p.Lifetime)
	}
	tDelete := time.Now()
	if err := s.deletePod(ctx, p.name()); err != nil {
		s.violate(n, p.name(), violLiveness, "could not delete the pod through the API: %v", err)
		return
	}
	n.count(func(st *nodeStats) { st.PodsDeleted++ })
	var unmounted time.Time
	if p.NAS != nil {
		go func() {
			sleepUntil(ctx, tDelete.Add(p.NAS.Hold))
			s.unmountNAS(ctx, r)
		}()
	}
	gone := s.waitGone(ctx, r, tDelete)
	r.mu.Lock()
	unmounted = r.unmountedAt
	hadNAS := r.nas != nil
	r.mu.Unlock()
	n.count(func(st *nodeStats) {
		if gone.volumes.IsZero() {
			return
		}
		st.PodsGone++
		if p.SubPath {
			st.Volumes[volSubPath].TornDown++
		}
		if hadNAS && !unmounted.IsZero() {
			st.UnmountToVolumesGone = append(st.UnmountToVolumesGone, gone.volumes.Sub(unmounted).Seconds())
			return
		}
		st.DeletionToVolumesGone = append(st.DeletionToVolumesGone, gone.volumes.Sub(tDelete).Seconds())
		st.DeletionToPodDirGone = append(st.DeletionToPodDirGone, gone.podDir.Sub(tDelete).Seconds())
		st.DeletionToAPIGone = append(st.DeletionToAPIGone, gone.api.Sub(tDelete).Seconds())
	})
}

// deletePod deletes the pod through the API (retried; one already gone is
// deleted).
func (s *soak) deletePod(ctx context.Context, name string) error {
	err := retry(ctx, func() error {
		return s.cp.do(ctx, http.MethodDelete, "/api/v1/namespaces/"+soakNamespace+"/pods/"+name, nil, nil)
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// deleteInSetUp deletes the pod as soon as the kubelet logs that it
// started mounting one of its volumes (its log followed from offset every
// few milliseconds), and records whether the deletion came before every
// SetUp had succeeded.
func (s *soak) deleteInSetUp(ctx context.Context, r *podRun, offset int64) {
	n := r.node
	marker := `(UID: \"` + r.uid + `\")`
	f := logFollower{path: n.kubelet.logPath, offset: offset}
	found := false
	err := poll(ctx, s.in.RunBound, func() (bool, error) {
		for range 25 { // every 2 ms between the poll's 50 ms ticks
			_ = f.next(func(line string, _ int64) {
				found = found || strings.Contains(line, "operationExecutor.MountVolume started") && strings.Contains(line, marker)
			})
			if found {
				return true, nil
			}
			time.Sleep(2 * time.Millisecond)
		}
		seen, _ := s.pods.get(r.plan.name())
		return seen.Running, nil // the line was missed (a kubelet restart)
	})
	if errors.Is(err, ErrTimeout) {
		s.violate(n, r.plan.name(), violLiveness, "the kubelet did not start mounting the pod's volumes %v after its creation", s.in.RunBound)
	}
	tDelete := time.Now()
	if err := s.deletePod(ctx, r.plan.name()); err != nil {
		s.violate(n, r.plan.name(), violLiveness, "could not delete the pod through the API: %v", err)
		return
	}
	gone := s.waitGone(ctx, r, tDelete)
	// Did the deletion land while SetUp ran? Every volume's SetUp
	// succeeded before it (by the kubelet's clock, the same as ours):
	// no. Otherwise yes.
	r.mu.Lock()
	during := false
	for _, t := range r.plan.Volumes {
		at, ok := r.setUp[volumeName[t]]
		during = during || !ok || at.After(tDelete)
	}
	r.mu.Unlock()
	n.count(func(st *nodeStats) {
		st.PodsDeleted++
		st.SetUpDeletes++
		if during {
			st.SetUpDeletesDuring++
		}
		if !gone.volumes.IsZero() {
			st.PodsGone++
			st.DeletionToVolumesGone = append(st.DeletionToVolumesGone, gone.volumes.Sub(tDelete).Seconds())
			st.DeletionToPodDirGone = append(st.DeletionToPodDirGone, gone.podDir.Sub(tDelete).Seconds())
			st.DeletionToAPIGone = append(st.DeletionToAPIGone, gone.api.Sub(tDelete).Seconds())
		}
	})
}

// goneTimes are when a deleted pod's volumes, its directory and its API
// object were seen gone (zero: never).
type goneTimes struct {
	volumes, podDir, api time.Time
}

// waitGone waits until the pod is gone from the API and its directory
// from the node. Past the liveness bound after the last thing that held it
// (the deletion, its NAS's unmount, a fault on its node) it is a
// violation, and the wait goes on until ctx ends.
func (s *soak) waitGone(ctx context.Context, r *podRun, tDelete time.Time) goneTimes {
	n := r.node
	var g goneTimes
	podDir := n.inNode(filepath.Join(kubeletRootInNode, "pods", r.uid))
	reported := false
	for {
		now := time.Now()
		if g.volumes.IsZero() && volumesGone(filepath.Join(podDir, "volumes")) {
			g.volumes = now
		}
		if g.podDir.IsZero() {
			if _, err := os.Lstat(podDir); errors.Is(err, os.ErrNotExist) {
				g.podDir = now
				if g.volumes.IsZero() {
					g.volumes = now
				}
			}
		}
		if seen, ok := s.pods.get(r.plan.name()); g.api.IsZero() && ok && seen.Gone && seen.UID == r.uid {
			g.api = seen.GoneAt
		}
		if !g.podDir.IsZero() && !g.api.IsZero() {
			return g
		}
		r.mu.Lock()
		held := r.nas != nil && r.nas.mounted
		since := tDelete
		if r.unmountedAt.After(since) {
			since = r.unmountedAt
		}
		r.mu.Unlock()
		if e := n.lastFaultEnd(now); e.After(since) {
			since = e
		}
		if !held && !reported && now.Sub(since) > s.in.LivenessBound {
			reported = true
			s.violate(n, r.plan.name(), violLiveness, "still there %v after its deletion, its NAS's unmount or the last fault (in the API: %v, pod directory: %v, volumes: %v)",
				s.in.LivenessBound, g.api.IsZero(), g.podDir.IsZero(), g.volumes.IsZero())
		}
		if !sleepFor(ctx, 200*time.Millisecond) {
			return g
		}
	}
}

// volumesGone says whether no volume directory is left under a pod's
// volumes/ (or it is gone).
func volumesGone(dir string) bool {
	plugins, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	for _, p := range plugins {
		vols, err := os.ReadDir(filepath.Join(dir, p.Name()))
		if err != nil && !errors.Is(err, os.ErrNotExist) || len(vols) > 0 {
			return false
		}
	}
	return true
}

// mountNAS mounts the pod's NAS in its volume, from the node.
func (s *soak) mountNAS(ctx context.Context, r *podRun) {
	p, n := r.plan, r.node
	files := map[string]int{}
	for i, size := range p.NAS.Files {
		files[sentinelPath(i)] = size
	}
	dir := nasDir(r.uid, p.NAS.Volume)
	source := filepath.Join(s.dir, "nas", p.name())
	r.mu.Lock()
	defer r.mu.Unlock()
	nas, err := mountNodeNASOf(ctx, n.clusterNode, dir, p.NAS.Kind, source, files)
	if err != nil {
		// The volume must be there: the pod runs.
		s.violate(n, p.name(), violLiveness, "mounting the NAS in volume %s of the running pod: %v", volumeName[p.NAS.Volume], err)
		if nas != nil && nas.mounted {
			_ = nas.unmount(ctx)
		}
		return
	}
	r.nas, r.nasType = nas, p.NAS.Volume
	n.count(func(st *nodeStats) {
		st.NASMounted++
		st.NASByKind[p.NAS.Kind.String()]++
		st.NASByType[p.NAS.Volume]++
		st.SentinelFiles += len(nas.files)
	})
}

// unmountNAS checks the NAS's sentinels a last time and unmounts it; a
// bind NAS's host directory is checked again after the unmount, then
// removed.
func (s *soak) unmountNAS(ctx context.Context, r *podRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nas == nil || !r.nas.mounted {
		return
	}
	lost, _ := r.nas.lost()
	s.accountLoss(r, lost, "before its unmount")
	var err error
	for try := 0; try < 5; try++ {
		if err = r.nas.unmount(ctx); err == nil || !sleepFor(ctx, time.Second) {
			break
		}
	}
	if err != nil {
		s.violate(r.node, r.plan.name(), violLiveness, "unmounting the NAS: %v", err)
		return
	}
	r.unmountedAt = time.Now()
	if r.nas.kind == nasBind {
		lost, _ := r.nas.lostUnder(r.nas.source)
		s.accountLoss(r, lost, "in its host directory after the unmount")
		_ = os.RemoveAll(r.nas.source)
	}
}

// sleepUntil sleeps until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	return sleepFor(ctx, time.Until(t))
}

// sleepFor sleeps for d; false when ctx ended first.
func sleepFor(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// nodeStats are one node's figures.
type nodeStats struct {
	PodsCreated, PodsRan, PodsDeleted, PodsGone int
	Volumes                                     map[volumeType]*volumeCount
	SetUpDeletes, SetUpDeletesDuring            int

	NASMounted      int
	NASByKind       map[string]int
	NASByType       map[volumeType]int
	SentinelFiles   int // files written into NAS mounts
	SentinelChecks  int // file checks (sha256), after every TearDown attempt and before each unmount
	NASChecks       int
	FilesLost       int
	BytesLost       int64
	BytesLostByType map[volumeType]int64

	FailedNAS, FailedFault, FailedBusy, FailedUnexplained int // failed TearDowns of the soak's volumes, by what explains them

	// ContainerdOrphans are the shims left after the drain that
	// containerd no longer knew: started while it was restarted.
	ContainerdOrphans []string

	UnmountCounterChecks, UnmountCounterMismatches int
	DangerChecks, DangerLagged, DangerMismatches   int

	CreationToRunning     []float64
	DeletionToVolumesGone []float64
	DeletionToPodDirGone  []float64
	DeletionToAPIGone     []float64
	UnmountToVolumesGone  []float64
}

// volumeCount is one volume type's figures on a node.
type volumeCount struct {
	Planned        int // in the pods created
	SetUp          int // SetUp succeeded, by the kubelet's log (again after a kubelet restart)
	TornDown       int // TearDown succeeded
	TearDownFailed int
}

func (st *nodeStats) init() {
	st.Volumes = map[volumeType]*volumeCount{}
	for _, t := range volumeTypes {
		st.Volumes[t] = &volumeCount{}
	}
	st.NASByKind, st.NASByType, st.BytesLostByType = map[string]int{}, map[volumeType]int{}, map[volumeType]int64{}
}

// count reads or changes the node's figures under their lock.
func (n *soakNode) count(fn func(*nodeStats)) {
	n.statsMu.Lock()
	defer n.statsMu.Unlock()
	fn(&n.stats)
}

// faultOngoing says whether a fault on the node is under way at t.
func (n *soakNode) faultOngoing(t time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.faultStart.IsZero() && !t.Before(n.faultStart)
}

// reapOrphans waits, every 10 s until ctx ends, for the exited processes
// this process inherited as the namespace's PID 1: the containerd shims
// (each daemonizes, and its parent, the namespace's init, must reap it)
// and the CNI plugins a restarted containerd left. The processes the
// harness started itself are its exec.Cmds' to wait for, and are left
// alone: only a zombie whose name is one of orphanNames is reaped.
func reapOrphans(ctx context.Context) {
	for sleepFor(ctx, 10*time.Second) {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			continue
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid …; comm may hold spaces and parentheses.
			lp, rp := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
			if lp < 0 || rp < lp {
				continue
			}
			comm, rest := string(b[lp+1:rp]), strings.Fields(string(b[rp+1:]))
			if len(rest) < 2 || rest[0] != "Z" || rest[1] != strconv.Itoa(os.Getpid()) || !slices.ContainsFunc(orphanNames, func(p string) bool { return strings.HasPrefix(comm, p) }) {
				continue
			}
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
}

// orphanNames are the name prefixes (comm, at most 15 bytes) of the
// processes reapOrphans reaps.
var orphanNames = []string{"containerd-shim", "host-local", "bridge", "loopback", "portmap"}
