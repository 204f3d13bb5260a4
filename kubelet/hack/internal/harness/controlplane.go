package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The control plane's ports, private to the network namespace. The host's
// listening sockets on them are compared before and after the run.
const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
	// 443, the kubernetes Service's port: in a whole cluster the bridge
	// also holds the Service's ClusterIP (setUpBridge), so that pods reach
	// the API server at KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT
	// without a kube-proxy.
	apiserverPort         = 443
	controllerManagerPort = 10257
	schedulerPort         = 10259
)

var controlPlanePorts = []int{etcdClientPort, etcdPeerPort, apiserverPort, controllerManagerPort, schedulerPort}

// clusterControllers are the controllers the whole cluster's
// kube-controller-manager runs: what namespaces, service accounts and their
// tokens, the root CA ConfigMap, DaemonSets, ReplicaSets, replication
// controllers (the EmptyDir wrapper specs make one) and owner references
// need, and the node lifecycle controller, which lifts the
// node.kubernetes.io/not-ready NoSchedule taint a new Node is admitted with
// once it is Ready (without it the scheduler places nothing). No node IPAM
// (each node's pod range is in its CNI conflist), no endpoints (no
// kube-proxy).
var clusterControllers = []string{
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"daemonset-controller",
	"replicaset-controller",
	"replicationcontroller-controller",
	"garbage-collector-controller",
	"node-lifecycle-controller",
}

// serviceRange is the API server's service range; its first address is
// kubernetes.default's ClusterIP, which the serving certificate names.
var (
	serviceRange = "10.0.0.0/24"
	serviceIP    = net.IPv4(10, 0, 0, 1)
)

// controlPlane is a one-node control plane in the namespace: Debian's
// etcd and kube-apiserver (built by kubelet/hack/build.sh --apiserver),
// no controller manager and no scheduler. It gives the kubelets a kube
// client, which the projected volume plugin needs for every SetUp; the
// kubelets still run static pods, and create their mirror pods through it.
//
// The Node authorizer and NodeRestriction admit the kubelet (a node
// client certificate); the driver uses an admin certificate. The
// kubernetes service's endpoints are not reconciled
// (--endpoint-reconciler-type=none): the reconciler refuses a loopback
// advertise address, and nothing here needs the service.
type controlPlane struct {
	dir        string
	spec       controlPlaneSpec
	pki        *pki
	kubeconfig string // the one-node kubelet's: the node client certificate
	etcd       *daemon
	apiserver  *daemon
	scheduler  *daemon      // nil in the one-node setup
	manager    *daemon      // kube-controller-manager; nil in the one-node setup
	client     *http.Client // admin
}

// controlPlaneSpec is what startControlPlaneFor runs.
type controlPlaneSpec struct {
	apiserver string // the kube-apiserver binary
	// scheduler and controllerManager are their binaries for a whole
	// cluster; empty: the one-node setup (none).
	scheduler, controllerManager string
	// advertise is the API server's address on the cluster's bridge;
	// nil: loopback only, with no endpoint reconciler.
	advertise net.IP
	nodes     []string // the node names that get client certificates
	// featureGates are the API server's and the controller manager's
	// --feature-gates ("Name=true,…"); empty: none.
	featureGates string
}

// cluster says whether this is a whole cluster's control plane.
func (s controlPlaneSpec) cluster() bool { return s.advertise != nil }

// daemon is a process the control plane started, with its log.
type daemon struct {
	name    string
	logPath string
	args    []string // the binary and its arguments
	cmd     *exec.Cmd
	exited  chan struct{}
}

func startDaemon(name, logPath, bin string, args ...string) (*daemon, error) {
	d := &daemon{name: name, logPath: logPath, args: append([]string{bin}, args...)}
	return d, d.launch()
}

// launch starts the daemon's process, appending to its log.
func (d *daemon) launch() error {
	logf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	d.cmd, d.exited = exec.Command(d.args[0], d.args[1:]...), make(chan struct{})
	d.cmd.Env = []string{runtimePath}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.name, err)
	}
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(d.cmd, d.exited)
	return nil
}

// alive is nil while the daemon runs.
func (d *daemon) alive() error {
	select {
	case <-d.exited:
		return fmt.Errorf("%s exited: %s", d.name, d.cmd.ProcessState)
	default:
		return nil
	}
}

// kill ends the daemon at once. Its state is scratch: a graceful stop
// would only cost time (kube-apiserver takes many seconds on SIGTERM).
func (d *daemon) kill() {
	if d == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// startControlPlane writes the PKI and the kubelet's kubeconfig under dir,
// starts etcd and the API server, and waits until the API server is ready
// and has created the default namespace (/readyz can answer ok first).
func startControlPlane(ctx context.Context, dir, apiserverBin string, log *logger) (_ *controlPlane, err error) {
	return startControlPlaneFor(ctx, dir, controlPlaneSpec{apiserver: apiserverBin, nodes: []string{nodeName}}, log)
}

// startControlPlaneFor starts the control plane spec describes. For a
// whole cluster it also starts kube-scheduler and kube-controller-manager
// and waits until the scheduler is healthy and the controller manager has
// made the default namespace's ServiceAccount and root CA ConfigMap.
func startControlPlaneFor(ctx context.Context, dir string, spec controlPlaneSpec, log *logger) (_ *controlPlane, err error) {
	t0 := time.Now()
	apiserverBin := spec.apiserver
	cp := &controlPlane{dir: dir, spec: spec}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()
	serverIPs := []net.IP{serviceIP}
	if spec.cluster() {
		serverIPs = append(serverIPs, spec.advertise)
	}
	if cp.pki, err = newPKI(filepath.Join(dir, "pki"), serverIPs, spec.nodes); err != nil {
		return nil, fmt.Errorf("control plane PKI: %w", err)
	}
	if !spec.cluster() {
		if cp.kubeconfig, err = cp.writeKubeconfig(nodeCert(nodeName), "127.0.0.1"); err != nil {
			return nil, err
		}
	}
	tlsCfg, err := cp.pki.clientTLS(adminCert)
	if err != nil {
		return nil, err
	}
	cp.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	cp.etcd, err = startDaemon("etcd", filepath.Join(dir, "etcd.log"), etcdBinary,
		"--name", "e2e", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL, "--logger", "zap")
	if err != nil {
		return nil, err
	}
	p := cp.pki.path
	serverCrt, serverKey := cp.pki.certPair(serverCert)
	// The one-node setup serves on loopback; the reconciler refuses a
	// loopback advertise address. A whole cluster serves on the bridge too,
	// and reaches each kubelet at its InternalIP (logs, exec, port-forward)
	// as the admin-like kubelet client.
	addrArgs := []string{"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none"}
	if spec.cluster() {
		kcrt, kkey := cp.pki.certPair(kubeletClient)
		addrArgs = []string{"--bind-address", "0.0.0.0", "--advertise-address", spec.advertise.String(),
			"--kubelet-preferred-address-types", "InternalIP",
			"--kubelet-client-certificate", kcrt, "--kubelet-client-key", kkey}
		if spec.featureGates != "" {
			addrArgs = append(addrArgs, "--feature-gates", spec.featureGates)
		}
	}
	cp.apiserver, err = startDaemon("kube-apiserver", filepath.Join(dir, "kube-apiserver.log"), apiserverBin, append(addrArgs,
		"--etcd-servers", etcdURL,
		"--secure-port", fmt.Sprint(apiserverPort),
		"--service-cluster-ip-range", serviceRange,
		"--client-ca-file", p(caCertFile),
		"--tls-cert-file", serverCrt, "--tls-private-key-file", serverKey,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", p(saPublicFile),
		"--service-account-signing-key-file", p(saPrivateFile),
		"--authorization-mode", "Node,RBAC",
		// As kubeadm and managed clusters run it: without it no privileged
		// container, and so no CSI node plugin (deploy/csi), is admitted.
		"--allow-privileged=true",
		"--cert-dir", filepath.Join(dir, "apiserver-certs"),
		"--profiling=false", "--v=1")...)
	if err != nil {
		return nil, err
	}
	err = poll(ctx, 60*time.Second, func() (bool, error) {
		if err := errors.Join(cp.etcd.alive(), cp.apiserver.alive()); err != nil {
			return false, fmt.Errorf("%w (logs in %s)", err, dir)
		}
		var ns corev1.Namespace
		return cp.get(ctx, "/readyz", nil) == nil && cp.get(ctx, "/api/v1/namespaces/default", &ns) == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the API server did not become ready with the default namespace: %w", err)
	}
	if spec.cluster() {
		if err := cp.startSchedulerAndManager(ctx); err != nil {
			return nil, err
		}
		log.Printf("control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager) ready in %.1fs", time.Since(t0).Seconds())
		return cp, nil
	}
	// The default ServiceAccount, which kube-controller-manager would
	// create: the pods created through the API use it for their tokens.
	sa := corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if err := cp.do(ctx, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", &sa, nil); err != nil && !errors.Is(err, ErrExists) {
		return nil, fmt.Errorf("creating the default ServiceAccount: %w", err)
	}
	log.Printf("control plane (etcd, kube-apiserver %s) ready in %.1fs", apiserverBin, time.Since(t0).Seconds())
	return cp, nil
}

// restartAPIServer kills the API server (SIGKILL, as a crash would), waits
// down, starts it again with the same flags and waits until it is ready.
func (cp *controlPlane) restartAPIServer(ctx context.Context, down time.Duration) error {
	cp.apiserver.kill()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	if err := cp.apiserver.launch(); err != nil {
		return err
	}
	return poll(ctx, 90*time.Second, func() (bool, error) {
		if err := cp.apiserver.alive(); err != nil {
			return false, fmt.Errorf("%w (log %s)", err, cp.apiserver.logPath)
		}
		return cp.get(ctx, "/readyz", nil) == nil, nil
	})
}

// stop kills the API server, then etcd.
// pids are the control plane's processes, which live across both kubelets'
// turns.
func (cp *controlPlane) pids() []int {
	var pids []int
	for _, d := range []*daemon{cp.etcd, cp.apiserver, cp.scheduler, cp.manager} {
		if d != nil && d.cmd != nil && d.cmd.Process != nil {
			pids = append(pids, d.cmd.Process.Pid)
		}
	}
	return pids
}

func (cp *controlPlane) stop() {
	cp.manager.kill()
	cp.scheduler.kill()
	cp.apiserver.kill()
	cp.etcd.kill()
}

// startSchedulerAndManager starts kube-scheduler and
// kube-controller-manager with their own certificates (the default RBAC
// roles' names; each controller gets its service account's credentials,
// as kubeadm runs it), and waits until the scheduler's /healthz answers
// and the controller manager has made the default namespace's
// ServiceAccount and published the root CA (kube-root-ca.crt).
func (cp *controlPlane) startSchedulerAndManager(ctx context.Context) error {
	sched, err := cp.writeKubeconfig(schedulerCert, "127.0.0.1")
	if err != nil {
		return err
	}
	mgr, err := cp.writeKubeconfig(managerCert, "127.0.0.1")
	if err != nil {
		return err
	}
	cp.scheduler, err = startDaemon("kube-scheduler", filepath.Join(cp.dir, "kube-scheduler.log"), cp.spec.scheduler,
		"--kubeconfig", sched, "--authentication-kubeconfig", sched, "--authorization-kubeconfig", sched,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(schedulerPort),
		"--cert-dir", filepath.Join(cp.dir, "scheduler-certs"), "--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	args := []string{"--kubeconfig", mgr, "--authentication-kubeconfig", mgr, "--authorization-kubeconfig", mgr,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(controllerManagerPort),
		"--cert-dir", filepath.Join(cp.dir, "controller-manager-certs"),
		"--controllers", strings.Join(clusterControllers, ","),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file", cp.pki.path(saPrivateFile),
		"--root-ca-file", cp.pki.path(caCertFile),
		"--profiling=false", "--v=1"}
	if cp.spec.featureGates != "" {
		args = append(args, "--feature-gates", cp.spec.featureGates)
	}
	cp.manager, err = startDaemon("kube-controller-manager", filepath.Join(cp.dir, "kube-controller-manager.log"), cp.spec.controllerManager, args...)
	if err != nil {
		return err
	}
	// The scheduler's serving certificate is self-signed: /healthz is all
	// that is read from it.
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err = poll(ctx, 90*time.Second, func() (bool, error) {
		if err := errors.Join(cp.apiserver.alive(), cp.scheduler.alive(), cp.manager.alive()); err != nil {
			return false, fmt.Errorf("%w (logs in %s)", err, cp.dir)
		}
		resp, err := insecure.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, nil
		}
		var sa corev1.ServiceAccount
		var cm corev1.ConfigMap
		return cp.get(ctx, "/api/v1/namespaces/default/serviceaccounts/default", &sa) == nil &&
			cp.get(ctx, "/api/v1/namespaces/default/configmaps/kube-root-ca.crt", &cm) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kube-scheduler or kube-controller-manager not ready (no healthy scheduler, or no default ServiceAccount and kube-root-ca.crt): %w", err)
	}
	return nil
}

// nodeKubeconfig writes the kubeconfig of a whole cluster's node: its
// client certificate, the API server at the bridge address.
func (cp *controlPlane) nodeKubeconfig(node string) (string, error) {
	return cp.writeKubeconfig(nodeCert(node), cp.spec.advertise.String())
}

// adminKubeconfig writes the admin's kubeconfig (for e2e.test).
func (cp *controlPlane) adminKubeconfig() (string, error) {
	return cp.writeKubeconfig(adminCert, "127.0.0.1")
}

// apiURL is the API server's address for path, which may end in an
// escaped query ("?labelSelector=…").
func apiURL(path string) string {
	path, query, _ := strings.Cut(path, "?")
	return (&url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", apiserverPort), Path: path, RawQuery: query}).String()
}

// ErrNotFound is matched by the error of get for a 404.
var ErrNotFound = errors.New("not found")

// get reads path as the admin, decoding the JSON answer into v unless v
// is nil.
func (cp *controlPlane) get(ctx context.Context, path string, v any) error {
	return cp.do(ctx, http.MethodGet, path, nil, v)
}

// ErrExists is matched by the error of do for a 409 Conflict.
var ErrExists = errors.New("already exists")

// StatusError is an answer of the API server other than 2xx, 404 and 409.
type StatusError struct {
	Code   int
	Status string // "500 Internal Server Error"
	Body   string
}

func (e *StatusError) Error() string { return e.Status + ": " + e.Body }

// do sends in (unless nil) as JSON to path with method, as the admin, and
// decodes the JSON answer into v (unless nil).
func (cp *controlPlane) do(ctx context.Context, method, path string, in, v any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, apiURL(path), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cp.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%s %s: %w", method, path, ErrExists)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("%s %s: %w", method, path, &StatusError{Code: resp.StatusCode, Status: resp.Status, Body: strings.TrimSpace(string(out))})
	case v == nil:
		return nil
	}
	return json.Unmarshal(out, v)
}

// text reads path as the admin, as text (a pod's log).
func (cp *controlPlane) text(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL(path), nil)
	if err != nil {
		return "", err
	}
	resp, err := cp.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %w", path, &StatusError{Code: resp.StatusCode, Status: resp.Status, Body: strings.TrimSpace(string(b))})
	}
	return string(b), nil
}

// mirrorPod is the API server's mirror of the kubelet's static pod, or an
// error matching ErrNotFound when there is none.
func (cp *controlPlane) mirrorPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	return cp.apiPod(ctx, pod.Namespace, staticPodName(pod))
}

// createPod creates pod through the API and returns it as created (with
// its UID).
func (cp *controlPlane) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var created corev1.Pod
	if err := cp.do(ctx, http.MethodPost, "/api/v1/namespaces/"+pod.Namespace+"/pods", pod, &created); err != nil {
		return nil, err
	}
	return &created, nil
}

// deletePod deletes the pod through the API (gracefully: the kubelet
// stops it, then removes the object).
func (cp *controlPlane) deletePod(ctx context.Context, pod *corev1.Pod) error {
	return cp.do(ctx, http.MethodDelete, "/api/v1/namespaces/"+pod.Namespace+"/pods/"+pod.Name, nil, nil)
}

// apiPod is the pod as the API server has it, or an error matching
// ErrNotFound.
func (cp *controlPlane) apiPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	if err := cp.get(ctx, "/api/v1/namespaces/"+namespace+"/pods/"+name, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// staticPodName is a static pod's name as the kubelet reports it.
func staticPodName(pod *corev1.Pod) string { return pod.Name + "-" + nodeName }

// writeKubeconfig writes a kubeconfig for the certificate name, with the
// API server at host, and returns its path.
func (cp *controlPlane) writeKubeconfig(name, host string) (string, error) {
	crt, key := cp.pki.certPair(name)
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: %s
current-context: e2e
`, net.JoinHostPort(host, fmt.Sprint(apiserverPort)), cp.pki.path(caCertFile), name, crt, key, name)
	path := filepath.Join(cp.dir, name+".kubeconfig")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}
