// Command soak runs nodevol under load and faults on a real two-node
// cluster: for a chosen duration it creates and deletes pods through the
// API at a chosen rate, with a mix of volumes (emptyDir of every medium,
// secret, configMap, projected, downwardAPI, subPath, nodevol-csi's inline
// volumes), mounts a "NAS" with sentinel files inside one pod's volume in
// ten before its deletion, and kills or restarts the kubelet, containerd,
// nodevol-csi, the exporter and the API server at random times, all from
// one seed. It checks as it goes and after the drain that no sentinel byte
// is lost, nothing is left on the nodes or the host, every deleted pod goes
// within a bound, the components' resources do not grow with the pods
// churned, and the exporter's and the kubelet's metrics tell the truth.
//
//	go run ./hack/soak -nodevol KUBELET -stock KUBELET -apiserver KUBE-APISERVER \
//	  -scheduler KUBE-SCHEDULER -controller-manager KUBE-CONTROLLER-MANAGER [-duration 30m] [-rate 30] [-seed N]
//
// (as root, from the kubelet/ directory). Node 1 runs nodevol-kubelet and
// node 2 the stock kubelet (-kubelets), both with deploy/'s exporter and
// nodevol-csi, in the private namespaces of kubelet/hack/e2e, whose
// harness it shares. It prints the figures as markdown and exits 0 when no
// invariant was violated, 1 when one was (with the command that replays
// the run's schedule), 2 when the harness failed. docs/reliability.md has
// the details and the figures.
package main

import (
	"os"

	"github.com/nodevol/nodevol/kubelet/hack/internal/harness"
)

func main() {
	os.Exit(harness.Soak(os.Args[1:], os.Stdout, os.Stderr))
}
