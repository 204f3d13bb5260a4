package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The cluster's network lives entirely in the run's network namespace and
// in namespaces made inside it: nothing of it is on the host, and it goes
// when the namespace's PID 1 exits.
//
//   - The run's namespace holds the control plane and a bridge, nodeBridge,
//     with clusterGateway's address: every node's kubelet reaches the API
//     server there, and the API server reaches each kubelet (logs, exec,
//     port-forward) at the node's InternalIP on the same bridge.
//   - Node i has a network namespace of its own (ip netns, under the run's
//     private /run/netns), joined to the bridge by a veth pair: its eth0 has
//     nodeIP(i), its default route is the gateway.
//   - Its pods are on a bridge of their own inside the node's namespace,
//     made by Debian's CNI bridge plugin from the conflist cniConflist
//     writes, with host-local addresses from podCIDR(i) whose state lives
//     in the workdir. The run's namespace routes each node's pod range to
//     the node, so pods of two nodes reach each other.
//
// The addresses are in ranges no route leads out of: the run's namespace
// has no interface but lo and the bridge.
const (
	nodeBridge   = "nv-e2e0"
	bridgePrefix = 24
)

var clusterGateway = net.IPv4(10, 250, 0, 1)

// nodeIP is node i's InternalIP (i from 1).
func nodeIP(i int) net.IP { return net.IPv4(10, 250, 0, byte(10+i)) }

// podCIDR is node i's pod address range.
func podCIDR(i int) string { return fmt.Sprintf("10.244.%d.0/24", i) }

// ipBinary is Debian's iproute2 ip, run by path like the runtime's binaries.
const ipBinary = "/bin/ip"

// ip runs ip with args, for at most 10 seconds.
func ip(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ipBinary, args...)
	cmd.Env = []string{runtimePath}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setUpBridge creates the cluster's bridge in the run's network namespace,
// with the gateway's address, and lets that namespace forward between the
// nodes (net.ipv4.ip_forward is the namespace's own, not the host's).
func setUpBridge(ctx context.Context) error {
	for _, args := range [][]string{
		{"link", "add", nodeBridge, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", clusterGateway, bridgePrefix), "dev", nodeBridge},
		// kubernetes.default's ClusterIP, on which the API server listens
		// (on every address, at apiserverPort = the Service's port 443):
		// a pod's in-cluster configuration reaches it with no kube-proxy.
		{"addr", "add", serviceIP.String() + "/32", "dev", nodeBridge},
		{"link", "set", nodeBridge, "up"},
	} {
		if err := ip(ctx, args...); err != nil {
			return fmt.Errorf("cluster network: %w", err)
		}
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
}

// nodeNetns is node i's network namespace's name under /run/netns.
func nodeNetns(i int) string { return fmt.Sprintf("e2e-node-%d", i) }

// addNodeNetwork makes node i's network namespace, joins it to the
// bridge with a veth pair (eth0 inside, nodeIP(i)), routes to the gateway
// from it, and routes node i's pod range to it from the run's namespace.
func addNodeNetwork(ctx context.Context, i int) error {
	ns := nodeNetns(i)
	host := fmt.Sprintf("nv-e2e-veth%d", i)
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", host, "master", nodeBridge},
		{"link", "set", host, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", nodeIP(i), bridgePrefix), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", clusterGateway.String()},
		{"route", "add", podCIDR(i), "via", nodeIP(i).String()},
	} {
		if err := ip(ctx, args...); err != nil {
			return fmt.Errorf("node %d's network: %w", i, err)
		}
	}
	return nil
}

// cniBinDir is where Debian's containernetworking-plugins installs the
// plugins; containerd runs them from there.
const cniBinDir = "/usr/lib/cni"

// cniNetworkName names the pod network in the conflist.
const cniNetworkName = "nodevol-e2e"

// cniConflist is the pod network of node i: the bridge plugin (a bridge
// cni0 in the node's namespace, the gateway of the pod range, no
// masquerading: no iptables, and nothing leaves the run anyway) with
// host-local addresses whose state is under ipamDir, and loopback.
func cniConflist(i int, ipamDir string) ([]byte, error) {
	_, cidr, err := net.ParseCIDR(podCIDR(i))
	if err != nil {
		return nil, err
	}
	gw := make(net.IP, len(cidr.IP.To4()))
	copy(gw, cidr.IP.To4())
	gw[3] = 1
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       cniNetworkName,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": ipamDir,
					"ranges":  [][]map[string]string{{{"subnet": cidr.String(), "gateway": gw.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// writeCNIConfig writes node i's conflist into confDir and makes its
// host-local state directory.
func writeCNIConfig(i int, confDir, ipamDir string) error {
	b, err := cniConflist(i, ipamDir)
	if err != nil {
		return err
	}
	for _, d := range []string{confDir, ipamDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(confDir, "10-nodevol-e2e.conflist"), b, 0o644)
}
