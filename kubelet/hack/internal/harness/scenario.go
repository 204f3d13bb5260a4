package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// flavor says which kubelet a row is about.
type flavor int

const (
	stockKubelet   flavor = iota // upstream's kubelet: its emptyDir teardown is os.RemoveAll
	nodevolKubelet               // the kubelet with nodevol's emptyDir plugin
)

var flavors = []flavor{stockKubelet, nodevolKubelet}

func (f flavor) String() string {
	switch f {
	case stockKubelet:
		return "stock"
	case nodevolKubelet:
		return "nodevol"
	}
	return fmt.Sprintf("flavor(%d)", int(f))
}

// scheduling says whether a scenario's pod can run beside the others'.
type scheduling int

const (
	concurrent scheduling = iota // runs beside the other concurrent scenarios
	alone                        // restarts the kubelet: runs after them, by itself
)

// scenario is one case of the table, run once against each kubelet.
type scenario struct {
	num   int
	name  string
	sched scheduling
	// kubelets are the kubelets it runs against; nil: every one. A
	// scenario that does not depend on the kubelet (a control) runs once.
	kubelets []flavor
	// nodevolOnStock: the stock kubelet's row is nodevol's own result
	// (nodevol-csi on a stock kubelet), not a peer's.
	nodevolOnStock bool
	// switches, for a scenario that replaces the node's kubelet binary in
	// place (from → to) while its pods run: it runs once, alone, on a node
	// of its own after every kubelet's turn, and its row is nodevol's
	// result. nil: the scenario runs on each kubelet's turn.
	switches *kubeletSwitch
	// expect says what the kubelet of the flavor should do, in words.
	expect func(flavor) string
	run    func(ctx context.Context, env *scenarioEnv, o *outcome)
}

// kubeletSwitch is an in-place switch of the node's kubelet binary.
type kubeletSwitch struct{ from, to flavor }

// String is the row's kubelet column: "stock→nodevol".
func (sw kubeletSwitch) String() string { return sw.from.String() + "→" + sw.to.String() }

// id is what -run matches: "1-nas-tmpfs".
func (s scenario) id() string { return fmt.Sprintf("%d-%s", s.num, s.name) }

// scenarioEnv is what a scenario runs against.
type scenarioEnv struct {
	flavor  flavor
	kubelet *kubelet
	api     *controlPlane // the kubelet's API server, for the mirror pods
	dir     string        // scratch space for the scenario (host directories to bind-mount)
	uid     string        // the pod's UID
	podName string        // the pod's name in its manifest
	// exporter is the exporter scenario's image and DaemonSet (nil when
	// that scenario is not selected).
	exporter *exporterInputs
	// csi is the CSI scenario's image and manifests (nil when that
	// scenario is not selected).
	csi *csiInputs
	// kubeletAlert selects the series of the kubelet alert on failed
	// emptyDir teardowns (nil: not checked).
	kubeletAlert *seriesSelector
	// kubeletBins are the kubelet binaries by flavor, for a scenario that
	// switches the node's kubelet.
	kubeletBins map[string]string
	log         *logger
}

// timing is one measured step.
type timing struct {
	Step     string        `json:"step"`
	Duration time.Duration `json:"duration"`
}

// outcome collects what a scenario observed and which expectations failed.
type outcome struct {
	observed []string // short, for the table's column
	facts    []string // details, listed under the table
	failures []string
	timings  []timing
	// unmountFailures is the number of failed TearDowns of the scenario's
	// emptyDir the kubelet logged, for the check of its metric.
	unmountFailures int
}

// observe records an observation for the table's column.
func (o *outcome) observe(format string, args ...any) {
	o.observed = append(o.observed, fmt.Sprintf(format, args...))
}

// fact records a detail, listed under the table.
func (o *outcome) fact(format string, args ...any) {
	o.facts = append(o.facts, fmt.Sprintf(format, args...))
}

// want records a failed expectation when ok is false.
func (o *outcome) want(ok bool, format string, args ...any) bool {
	if !ok {
		o.failures = append(o.failures, fmt.Sprintf(format, args...))
	}
	return ok
}

// harness records that the scenario could not reach a verdict.
func (o *outcome) harness(err error) {
	o.failures = append(o.failures, "harness: "+err.Error())
}

func (o *outcome) time(step string, d time.Duration) {
	o.timings = append(o.timings, timing{Step: step, Duration: d})
}

// row is one line of the result table.
type row struct {
	Scenario string `json:"scenario"`
	Kubelet  string `json:"kubelet"`
	// Peer: the row records a peer's behaviour (the stock kubelet's own
	// emptyDir), not nodevol's.
	Peer     bool     `json:"peer"`
	Expected string   `json:"expected"`
	Observed string   `json:"observed"`
	Details  []string `json:"details,omitempty"`
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`
	Timings  []timing `json:"timings,omitempty"`
}

// Pod building blocks.

const (
	scratchVolume = "scratch"
	fromPodText   = "written-by-pod" // with a newline in the file
	emptyDirDir   = "kubernetes.io~empty-dir"
)

// podUID is the scenario's pod UID for the flavor: fixed, so that log
// lines and directories name it.
func podUID(f flavor, num int) string {
	return fmt.Sprintf("0de0e2e0-0000-4000-8000-%04d%08d", int(f), num)
}

// busyboxPod is a static pod whose one container runs script in sh, then
// waits for SIGTERM; it exits at once on SIGTERM.
func busyboxPod(name, uid, script string, mounts []corev1.VolumeMount, volumes []corev1.Volume) *corev1.Pod {
	grace := int64(2)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid), Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           busyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", script + "\ntrap 'exit 0' TERM\nwhile true; do sleep 0.2; done"},
				VolumeMounts:    mounts,
			}},
			Volumes: volumes,
		},
	}
}

// startPod writes the pod's manifest and waits until it runs.
func startPod(ctx context.Context, env *scenarioEnv, pod *corev1.Pod, o *outcome) bool {
	t0 := time.Now()
	if err := env.kubelet.addPod(pod); err != nil {
		o.harness(err)
		return false
	}
	if err := env.kubelet.waitRunning(ctx, pod); err != nil {
		o.harness(err)
		return false
	}
	o.time("manifest written → pod running", time.Since(t0))
	return true
}

// mountsUnder lists the mounts of this (the kubelet's) mount namespace at
// or below dir.
func mountsUnder(dir string) ([]string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// mountAt is the topmost mount whose mount point is exactly path.
func mountAt(path string) (*mountinfo.Info, error) {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(path))
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, nil
	}
	return ms[len(ms)-1], nil
}

// waitPodGone waits until the kubelet removed the pod's directory, and
// checks that no mount is left below it.
func waitPodGone(ctx context.Context, env *scenarioEnv, pod *corev1.Pod, limit time.Duration, o *outcome) bool {
	dir := env.kubelet.podDir(pod)
	err := poll(ctx, limit, func() (bool, error) {
		_, err := os.Lstat(dir)
		return os.IsNotExist(err), env.kubelet.alive()
	})
	if !o.want(err == nil, "pod directory still there: %v", err) {
		if ms, _ := mountsUnder(dir); len(ms) > 0 {
			o.observe("mounts left: %s", strings.Join(ms, ", "))
		}
		return false
	}
	ms, err := mountsUnder(dir)
	if err != nil {
		o.harness(err)
		return false
	}
	return o.want(len(ms) == 0, "mounts left below the removed pod directory: %s", strings.Join(ms, ", "))
}

// readFileOr is the file's content, or a description of why there is none.
func readFileOr(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return "missing", false
		}
		return err.Error(), false
	}
	return string(b), true
}

// scenarioDir is a scratch directory for a scenario's host-side files.
func scenarioDir(base string, f flavor, s scenario) (string, error) {
	d := filepath.Join(base, "scenarios", f.String()+"-"+s.id())
	return d, os.MkdirAll(d, 0o755)
}
