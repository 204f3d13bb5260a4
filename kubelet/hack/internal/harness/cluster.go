package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// A whole cluster in the run's namespaces: the control plane with
// kube-scheduler and kube-controller-manager in the run's own network
// namespace, on the cluster's bridge (network.go), and one or two nodes,
// each a containerd and a kubelet in a network and mount namespace of
// their own. Pods are created through the API, scheduled, and run on the
// pod network; the API server reaches each kubelet at its InternalIP.

// clusterInputs are the whole cluster's binaries, handed to the
// namespace's PID 1.
type clusterInputs struct {
	Scheduler         string `json:"scheduler"`
	ControllerManager string `json:"controllerManager"`
	// Nodes is how many nodes the cluster has (1 or 2).
	Nodes int `json:"nodes"`
}

// clusterFeatureGates are on in every component of the cluster: the
// EmptyDir volume mode specs need EmptyDirVolumeMode (alpha in v1.37) in
// the API server (which drops the field otherwise) and in the kubelet.
var clusterFeatureGates = map[string]bool{"EmptyDirVolumeMode": true}

// featureGatesFlag is gates as a --feature-gates value, sorted.
func featureGatesFlag(gates map[string]bool) string {
	var parts []string
	for name, on := range gates {
		parts = append(parts, name+"="+strconv.FormatBool(on))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// clusterNodeName is node i's name (i from 1).
func clusterNodeName(i int) string { return fmt.Sprintf("e2e-node-%d", i) }

// clusterSandboxImage is the sandbox image of the cluster's containerd:
// the local pause image under the name the suite's image manifest gives
// the pause image, so the one image serves both.
const clusterSandboxImage = "registry.k8s.io/pause:3.10.2"

// startClusterControlPlane makes the run's /run/netns private, creates
// the bridge, and starts the control plane on it.
func startClusterControlPlane(ctx context.Context, workdir, apiserver string, in *clusterInputs, log *logger) (*controlPlane, error) {
	// ip netns keeps its namespaces' files under /run/netns: the run's own.
	if err := unix.Mount("nodevol-e2e", "/run/netns", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m,mode=0755"); err != nil {
		return nil, &os.PathError{Op: "mount tmpfs", Path: "/run/netns", Err: err}
	}
	if err := setUpBridge(ctx); err != nil {
		return nil, err
	}
	var nodes []string
	for i := 1; i <= in.Nodes; i++ {
		nodes = append(nodes, clusterNodeName(i))
		if err := addNodeNetwork(ctx, i); err != nil {
			return nil, err
		}
	}
	return startControlPlaneFor(ctx, filepath.Join(workdir, "control-plane"), controlPlaneSpec{
		apiserver:         apiserver,
		scheduler:         in.Scheduler,
		controllerManager: in.ControllerManager,
		advertise:         clusterGateway,
		nodes:             nodes,
		featureGates:      featureGatesFlag(clusterFeatureGates),
	}, log)
}

// clusterNode is one node of the whole cluster: a holder process in the
// node's network namespace that keeps the node's mount namespace (made by
// unshare, a slave of the run's, with fresh tmpfs mounts on hostDirs and
// the kubelet's root bound at /var/lib/kubelet), and containerd and the
// kubelet entered into its namespaces with nsenter.
type clusterNode struct {
	index      int
	name       string
	ip         net.IP
	dir        string
	holder     *exec.Cmd
	holderDone chan struct{}
	containerd *containerd
	kubelet    *kubelet
}

// enter is the prefix that runs a program in the node's mount and network
// namespaces.
func (n *clusterNode) enter() []string {
	return []string{"/usr/bin/nsenter", "-t", strconv.Itoa(n.holder.Process.Pid), "-m", "-n", "--"}
}

// nodeHolderArg, as the first argument, makes the binary a node's holder
// (runNodeHolder). It is not a flag: users never pass it.
const nodeHolderArg = "__nodevol_e2e_node__"

// holderSpec is what a node's holder mounts in the node's mount namespace.
type holderSpec struct {
	// Tmpfs are directories covered with a fresh tmpfs.
	Tmpfs []string `json:"tmpfs"`
	// KubeletRoot is bound at kubeletRootInNode, made rshared: the
	// kubelet's root at the path deploy/'s hostPath volumes name, with the
	// propagation Bidirectional mounts need.
	KubeletRoot string `json:"kubeletRoot"`
}

// kubeletRootInNode is a whole cluster's kubelet's --root-dir, inside its
// node's mount namespace: the default, as deploy/'s manifests expect.
const kubeletRootInNode = "/var/lib/kubelet"

// runNodeHolder runs in the node's network namespace and fresh mount
// namespace: it mounts what its spec (JSON, the one argument) says (so
// that the node's containerd and kubelet share none of the host's
// directories, nor another node's), says "ready" on stdout and waits until
// it is killed or its stdin closes.
func runNodeHolder(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var spec holderSpec
	if len(args) != 1 {
		fmt.Fprintln(stderr, "e2e: node holder: want one argument, its spec")
		return 2
	}
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		fmt.Fprintf(stderr, "e2e: node holder: %v\n", err)
		return 2
	}
	for _, d := range spec.Tmpfs {
		if err := unix.Mount("nodevol-e2e", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m,mode=0755"); err != nil {
			fmt.Fprintf(stderr, "e2e: node holder: %v\n", &os.PathError{Op: "mount tmpfs", Path: d, Err: err})
			return 2
		}
	}
	if spec.KubeletRoot != "" {
		if err := unix.Mount(spec.KubeletRoot, kubeletRootInNode, "", unix.MS_BIND, ""); err != nil {
			fmt.Fprintf(stderr, "e2e: node holder: %v\n", &os.PathError{Op: "mount MS_BIND " + spec.KubeletRoot, Path: kubeletRootInNode, Err: err})
			return 2
		}
		if err := unix.Mount("", kubeletRootInNode, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			fmt.Fprintf(stderr, "e2e: node holder: %v\n", &os.PathError{Op: "mount MS_SHARED", Path: kubeletRootInNode, Err: err})
			return 2
		}
	}
	fmt.Fprintln(stdout, "ready")
	_, _ = io.Copy(io.Discard, stdin)
	return 0
}

// nodeSpec is what startClusterNode starts.
type nodeSpec struct {
	index      int
	flavor     flavor
	kubeletBin string
	dir        string // the node's directory under the flavor's
	images     []string
	cgroupRoot string
}

// startClusterNode starts node spec.index's holder, containerd (the pod
// network's conflist, the images imported) and kubelet, and waits until
// the Node is Ready in the API.
func startClusterNode(ctx context.Context, cp *controlPlane, spec nodeSpec, log *logger) (_ *clusterNode, err error) {
	n := &clusterNode{index: spec.index, name: clusterNodeName(spec.index), ip: nodeIP(spec.index), dir: spec.dir, holderDone: make(chan struct{})}
	defer func() {
		if err != nil {
			n.stop()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(spec.dir, "kubelet", "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	var tmpfs []string
	for _, d := range hostDirs {
		if d != kubeletRootInNode {
			tmpfs = append(tmpfs, d)
		}
	}
	hs, err := json.Marshal(holderSpec{Tmpfs: tmpfs, KubeletRoot: root})
	if err != nil {
		return nil, err
	}
	// Not ip netns exec: it mounts a fresh /sys for the node's network
	// namespace, without the cgroup hierarchies the kubelet needs under it.
	n.holder = exec.Command("/usr/bin/nsenter", "--net=/run/netns/"+nodeNetns(spec.index), "--",
		"/usr/bin/unshare", "--mount", "--propagation", "slave", "--", self, nodeHolderArg, string(hs))
	n.holder.Env = []string{runtimePath}
	n.holder.Stderr = os.Stderr
	keepOpen, err := n.holder.StdinPipe()
	if err != nil {
		return nil, err
	}
	_ = keepOpen // closed when the holder is killed
	out, err := n.holder.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := n.holder.Start(); err != nil {
		return nil, fmt.Errorf("node %s's holder: %w", n.name, err)
	}
	go func() { _ = n.holder.Wait(); close(n.holderDone) }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		return nil, fmt.Errorf("node %s's holder did not get ready: %q, %v", n.name, line, err)
	}

	cniConf := filepath.Join(spec.dir, "cni", "net.d")
	if err := writeCNIConfig(spec.index, cniConf, filepath.Join(spec.dir, "cni", "ipam")); err != nil {
		return nil, err
	}
	t0 := time.Now()
	n.containerd, err = startContainerdFor(ctx, containerdSpec{
		dir: filepath.Join(spec.dir, "containerd"), images: spec.images, sandboxImage: clusterSandboxImage,
		cniBin: cniBinDir, cniConf: cniConf, enter: n.enter(),
	}, log)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := cp.nodeKubeconfig(n.name)
	if err != nil {
		return nil, err
	}
	n.kubelet, err = newKubeletFor(kubeletSpec{
		bin: spec.kubeletBin, dir: filepath.Join(spec.dir, "kubelet"), socket: n.containerd.socket,
		cgroupRoot: spec.cgroupRoot, kubeconfig: kubeconfig, nodeName: n.name, address: n.ip.String(), rootArg: kubeletRootInNode,
		featureGates: clusterFeatureGates, enter: n.enter(),
	}, log)
	if err != nil {
		return nil, err
	}
	if err := n.kubelet.start(ctx); err != nil {
		return nil, err
	}
	if err := checkKubeletKind(n.kubelet, spec.flavor); err != nil {
		return nil, err
	}
	err = poll(ctx, 120*time.Second, func() (bool, error) {
		if err := n.kubelet.alive(); err != nil {
			return false, err
		}
		var node corev1.Node
		if err := cp.get(ctx, "/api/v1/nodes/"+n.name, &node); err != nil {
			return false, nil
		}
		// Ready, and schedulable: the node lifecycle controller has lifted
		// the not-ready taint the Node was admitted with.
		if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }) {
			return false, nil
		}
		return slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}), nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s not Ready and untainted (kubelet log %s): %w", n.name, n.kubelet.logPath, err)
	}
	log.Printf("node %s (%s, %s) Ready in %.1fs", n.name, n.ip, spec.flavor, time.Since(t0).Seconds())
	return n, nil
}

// mountsUnder lists the node's mounts (in its own mount namespace) below
// dir.
func (n *clusterNode) mountsUnder(dir string) ([]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", n.holder.Process.Pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			found = append(found, fields[4])
		}
	}
	return found, sc.Err()
}

// stop stops the kubelet, then containerd (killing its tasks), then the
// holder: the node's mount namespace goes with its last process.
func (n *clusterNode) stop() {
	if n.kubelet != nil {
		n.kubelet.stop()
	}
	if n.containerd != nil {
		n.containerd.stop()
	}
	if n.holder != nil && n.holder.Process != nil {
		_ = n.holder.Process.Kill()
		<-n.holderDone
	}
}

// ErrNodeLeftovers is matched by the error of checkNodeClean.
var ErrNodeLeftovers = errors.New("the kubelet left pods or mounts behind")

// checkNodeClean checks that the node's kubelet tore down every pod: no
// pod directory under its root, and no mount below its root in the node's
// mount namespace.
func (n *clusterNode) checkNodeClean() error {
	ents, err := os.ReadDir(filepath.Join(n.kubelet.root, "pods"))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	mounts, err := n.mountsUnder(kubeletRootInNode)
	if err != nil {
		return err
	}
	if len(ents) > 0 || len(mounts) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return fmt.Errorf("%w: node %s: pod directories %v, mounts %v", ErrNodeLeftovers, n.name, names, mounts)
	}
	return nil
}

// checkKubeletKind fails when the kubelet binary is not of the flavor's
// kind: a nodevol build logs servedByNodevol when it builds its plugin
// list, a stock build never.
func checkKubeletKind(k *kubelet, f flavor) error {
	lines, _, err := k.logLines(0, servedByNodevol)
	if err != nil {
		return err
	}
	if served := len(lines) > 0; served != (f == nodevolKubelet) {
		return fmt.Errorf("%w: %s kubelet %s logged %q %d times; a %s kubelet logs it %s",
			errWrongKubelet, f, k.bin, servedByNodevol, len(lines), f, map[bool]string{true: "at start", false: "never"}[f == nodevolKubelet])
	}
	return nil
}
