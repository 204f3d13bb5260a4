package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// nodeName is the kubelet's node name (both kubelets register this Node,
// in turn); static pods and their mirror pods are named <name>-<nodeName>.
const nodeName = "e2e-node"

// The kubelet's ports, private to its network namespace, on its address
// (its API, which the API server reaches for logs and exec, is 20250).
const (
	readOnlyPort = 20255
	healthzPort  = 20248
)

// kubeletConfig is a kubelet of static pods from a directory, checked
// every second (it is started with --kubeconfig for the control plane, and
// creates their mirror pods), anonymous read-only access, cgroup v1 with
// cgroupfs under a private cgroupRoot, no iptables, no image GC, eviction
// thresholds that a busy build machine does not reach.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %[1]s
fileCheckFrequency: 1s
syncFrequency: 10s
containerRuntimeEndpoint: unix://%[2]s
cgroupDriver: cgroupfs
cgroupRoot: %[3]s
failCgroupV1: false
failSwapOn: false
address: %[6]s
port: 20250
readOnlyPort: 20255
healthzBindAddress: %[6]s
healthzPort: 20248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
makeIPTablesUtilChains: false
podLogsDir: %[4]s
volumePluginDir: %[5]s
resolvConf: ""
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
featureGates: %[7]s
`

// kubelet is one kubelet process; restart replaces it with another on the
// same root directory and log file.
type kubelet struct {
	bin        string
	dir        string // holds the config, the log, pki, pod logs
	root       string // its root directory, as the harness reaches it
	rootArg    string // --root-dir, as the kubelet sees it (root, or a bind of it in its node's mount namespace)
	manifests  string // staticPodPath
	logPath    string
	configArg  string
	kubeconfig string
	nodeName   string
	address    string   // its --node-ip, where it serves
	cgroupRoot string   // its cgroupRoot
	enter      []string // the prefix that runs it in its node's namespaces; nil: the run's
	cmd        *exec.Cmd
	exited     chan struct{}
	client     *http.Client
	log        *logger
}

// ErrKubeletExited is matched by the errors of waits the kubelet's exit
// cut short.
var ErrKubeletExited = errors.New("the kubelet exited")

func newKubelet(bin, dir, socket, cgroupRoot, kubeconfig string, log *logger) (*kubelet, error) {
	return newKubeletFor(kubeletSpec{bin: bin, dir: dir, socket: socket, cgroupRoot: cgroupRoot, kubeconfig: kubeconfig, nodeName: nodeName, address: "127.0.0.1"}, log)
}

// kubeletSpec is one kubelet: its binary, directories, runtime, node
// name and address, feature gates, and the namespaces it runs in.
type kubeletSpec struct {
	bin, dir, socket, cgroupRoot, kubeconfig string
	nodeName, address                        string
	// rootArg is the kubelet's --root-dir when it sees its root (dir/root)
	// elsewhere: a whole cluster's node binds it at /var/lib/kubelet.
	rootArg      string
	featureGates map[string]bool
	enter        []string // nsenter prefix; nil: the run's namespaces
}

func newKubeletFor(s kubeletSpec, log *logger) (*kubelet, error) {
	bin, dir, kubeconfig := s.bin, s.dir, s.kubeconfig
	k := &kubelet{
		kubeconfig: kubeconfig,
		nodeName:   s.nodeName,
		address:    s.address,
		cgroupRoot: s.cgroupRoot,
		enter:      s.enter,
		bin:        bin,
		dir:        dir,
		root:       filepath.Join(dir, "root"),
		rootArg:    s.rootArg,
		manifests:  filepath.Join(dir, "manifests"),
		logPath:    filepath.Join(dir, "kubelet.log"),
		configArg:  filepath.Join(dir, "kubelet-config.yaml"),
		client:     &http.Client{Timeout: 2 * time.Second},
		log:        log,
	}
	if k.rootArg == "" {
		k.rootArg = k.root
	}
	for _, d := range []string{k.root, k.manifests, filepath.Join(dir, "pki"), filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	gates, err := json.Marshal(s.featureGates) // JSON is YAML; {} or null for none
	if err != nil {
		return nil, err
	}
	if s.featureGates == nil {
		gates = []byte("{}")
	}
	cfg := fmt.Sprintf(kubeletConfig, k.manifests, s.socket, s.cgroupRoot, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"), k.address, gates)
	if err := os.WriteFile(k.configArg, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	return k, nil
}

// start starts the kubelet, appending to its log, and waits until its
// healthz answers.
func (k *kubelet) start(ctx context.Context) error {
	logf, err := os.OpenFile(k.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	k.cmd = commandIn(k.enter, k.bin, "--config", k.configArg, "--kubeconfig", k.kubeconfig, "--root-dir", k.rootArg, "--cert-dir", filepath.Join(k.dir, "pki"),
		"--hostname-override", k.nodeName, "--node-ip", k.address, "--v=2")
	k.cmd.Env = []string{runtimePath}
	k.cmd.Stdout, k.cmd.Stderr = logf, logf
	if err := k.cmd.Start(); err != nil {
		return fmt.Errorf("starting the kubelet %s: %w", k.bin, err)
	}
	exited := make(chan struct{})
	k.exited = exited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(k.cmd)
	err = poll(ctx, 60*time.Second, func() (bool, error) {
		if err := k.alive(); err != nil {
			return false, err
		}
		resp, err := k.client.Get(k.url(healthzPort, "/healthz"))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("kubelet healthz (log %s): %w", k.logPath, err)
	}
	return nil
}

// alive is nil while the kubelet runs, and says how it ended otherwise,
// with the last error lines of its log.
func (k *kubelet) alive() error {
	select {
	case <-k.exited:
		return fmt.Errorf("%w: %s; last errors: %s", ErrKubeletExited, k.cmd.ProcessState, k.lastErrors())
	default:
		return nil
	}
}

func (k *kubelet) lastErrors() string {
	lines, _, err := k.logLines(0, regexp.MustCompile(`^[EF]\d{4} `))
	if err != nil || len(lines) == 0 {
		return "none"
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

// kill ends the kubelet with SIGKILL, as a crash or the OOM killer would:
// the containers are containerd's and keep running. start starts it again.
func (k *kubelet) kill() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = k.cmd.Process.Kill()
		<-k.exited
	}
}

func (k *kubelet) stop() {
	if k.cmd != nil && k.cmd.Process != nil {
		stopProcess(k.cmd, k.exited, 10*time.Second)
	}
}

// replaceBinary does what an operator does who replaces the kubelet binary
// and restarts its service without draining the node: it stops the
// kubelet with SIGTERM (its pods' containers keep running: they are
// containerd's) and starts bin in its place with the same configuration,
// root directory, certificates and kubeconfig, logging to logName in the
// kubelet's directory. It returns once the new kubelet's healthz answers,
// with how long the old one took to exit.
func (k *kubelet) replaceBinary(ctx context.Context, bin, logName string) (exited time.Duration, err error) {
	t0 := time.Now()
	k.stop()
	exited = time.Since(t0)
	k.bin = bin
	k.logPath = filepath.Join(k.dir, logName)
	return exited, k.start(ctx)
}

// url is the kubelet's plain-HTTP address for path on port (healthz, or
// the read-only port's pods and metrics).
func (k *kubelet) url(port int, path string) string {
	return "http://" + net.JoinHostPort(k.address, strconv.Itoa(port)) + path
}

// logSize is the log's current length: the offset to read new lines from.
func (k *kubelet) logSize() (int64, error) {
	fi, err := os.Stat(k.logPath)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// logLines returns the log's lines from offset on that match re, and the
// offset after the last complete line read.
func (k *kubelet) logLines(offset int64, re *regexp.Regexp) ([]string, int64, error) {
	f, err := os.Open(k.logPath)
	if err != nil {
		return nil, offset, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, offset, err
	}
	var lines []string
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // EOF, or a line still being written: read it next time
		}
		offset += int64(len(line))
		if re.MatchString(line) {
			lines = append(lines, strings.TrimSuffix(line, "\n"))
		}
	}
	return lines, offset, nil
}

// get reads url from the kubelet's read-only port with read; a status
// other than 200 is an error.
func (k *kubelet) get(ctx context.Context, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// pods asks the read-only port for the kubelet's pods.
func (k *kubelet) pods(ctx context.Context) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := k.get(ctx, k.url(readOnlyPort, "/pods"), func(r io.Reader) error { return json.NewDecoder(r).Decode(&list) }); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// metrics is the kubelet's /metrics, the Prometheus text format (the
// read-only port's: the same registry as the authenticated port's that
// Prometheus scrapes).
func (k *kubelet) metrics(ctx context.Context) ([]byte, error) {
	var body []byte
	err := k.get(ctx, k.url(readOnlyPort, "/metrics"), func(r io.Reader) (err error) {
		body, err = io.ReadAll(r)
		return err
	})
	return body, err
}

// failedEmptyDirUnmounts is the number of emptyDir unmount operations the
// kubelet counts as failed in its own metric: the _count of
// storage_operation_duration_seconds with
// volume_plugin="kubernetes.io/empty-dir", operation_name="volume_unmount",
// status="fail-unknown", summed over its other labels.
func (k *kubelet) failedEmptyDirUnmounts(ctx context.Context) (float64, error) {
	n, err := k.failedUnmounts(ctx, "kubernetes.io/empty-dir")
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// failedUnmounts is, for each of plugins (the metric's volume_plugin
// label: "kubernetes.io/empty-dir", "kubernetes.io/csi:<driver>"), the
// number of unmount operations the kubelet counts as failed.
func (k *kubelet) failedUnmounts(ctx context.Context, plugins ...string) ([]float64, error) {
	var n []float64
	err := k.get(ctx, k.url(readOnlyPort, "/metrics"), func(r io.Reader) (err error) {
		n, err = countFailedUnmounts(r, plugins...)
		return err
	})
	return n, err
}

// countFailedUnmounts reads the Prometheus text format: the failed
// unmounts of each plugin, summed over the other labels.
func countFailedUnmounts(r io.Reader, plugins ...string) ([]float64, error) {
	m, err := parseMetrics(r)
	if err != nil {
		return nil, err
	}
	n := make([]float64, len(plugins))
	for i, p := range plugins {
		n[i], _ = failedUnmounts(p).sum(m)
	}
	return n, nil
}

// addPod writes the static pod's manifest (JSON is YAML) atomically: the
// kubelet never reads half a file.
func (k *kubelet) addPod(pod *corev1.Pod) error {
	b, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(k.dir, pod.Name+".json")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(k.manifests, pod.Name+".json"))
}

// removePod removes the manifest: for a static pod that is its deletion.
//
// It returns the log's length just before: the offset from which to read
// what the kubelet logs about the deletion.
func (k *kubelet) removePod(pod *corev1.Pod) (offset int64, err error) {
	if offset, err = k.logSize(); err != nil {
		return 0, err
	}
	return offset, os.Remove(filepath.Join(k.manifests, pod.Name+".json"))
}

// waitRunning waits until the pod is Running with every container running.
func (k *kubelet) waitRunning(ctx context.Context, pod *corev1.Pod) error {
	err := poll(ctx, 90*time.Second, func() (bool, error) {
		if err := k.alive(); err != nil {
			return false, err
		}
		pods, err := k.pods(ctx)
		if err != nil {
			return false, nil
		}
		for _, p := range pods {
			if p.UID != pod.UID || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.State.Running == nil {
					return false, nil
				}
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s not running: %w", pod.Name, err)
	}
	return nil
}

// podDir is the pod's directory under the kubelet's root.
func (k *kubelet) podDir(pod *corev1.Pod) string {
	return filepath.Join(k.root, "pods", string(pod.UID))
}

// volumeDir is the directory of the pod's volume of the plugin.
func (k *kubelet) volumeDir(pod *corev1.Pod, plugin, vol string) string {
	return filepath.Join(k.podDir(pod), "volumes", plugin, vol)
}

// klogTime is the time stamp of a klog line ("I1123 16:13:47.038289 …"),
// in a year of its own: only differences between lines mean anything.
func klogTime(line string) (time.Time, error) {
	if len(line) < 21 {
		return time.Time{}, fmt.Errorf("not a klog line: %q", line)
	}
	return time.Parse("0102 15:04:05.000000", line[1:21])
}

// teardownSpan is how long the kubelet took, by its own log, from starting
// to unmount the pod's emptyDir volume to its TearDown succeeding: the
// plugin's share of the pod's deletion, without the kubelet's loop periods.
func (k *kubelet) teardownSpan(offset int64, pod *corev1.Pod, vol string) (time.Duration, error) {
	name := regexp.QuoteMeta("kubernetes.io/empty-dir/" + string(pod.UID) + "-" + vol)
	started := regexp.MustCompile(`operationExecutor\.UnmountVolume started for volume \\"` + name + `\\"`)
	succeeded := regexp.MustCompile(`UnmountVolume\.TearDown succeeded for volume "` + name + `"`)
	lines, _, err := k.logLines(offset, regexp.MustCompile(started.String()+"|"+succeeded.String()))
	if err != nil {
		return 0, err
	}
	var t0, t1 time.Time
	for _, l := range lines {
		t, err := klogTime(l)
		if err != nil {
			return 0, err
		}
		switch {
		case started.MatchString(l) && t0.IsZero():
			t0 = t
		case succeeded.MatchString(l):
			t1 = t
		}
	}
	if t0.IsZero() || t1.IsZero() {
		return 0, fmt.Errorf("no UnmountVolume started and TearDown succeeded lines for %s in the kubelet's log", name)
	}
	return t1.Sub(t0), nil
}
