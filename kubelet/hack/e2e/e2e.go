// Command e2e runs nodevol's end-to-end test against real kubelets: the
// stock kubelet and the nodevol kubelet (nodevol's emptyDir plugin in
// place of upstream's), each with containerd and runc from Debian, in
// private mount, pid and network namespaces, through these scenarios:
// a NAS (tmpfs or bind mount) inside an emptyDir when its pod is
// deleted, with and without a kubelet restart in between; a Memory
// emptyDir with a sizeLimit; downwardAPI and projected volumes (which wrap
// emptyDir); a subPath mount; the exporter: deploy/'s
// DaemonSet run as a static pod, reporting a NAS mounted inside an
// emptyDir on /metrics, and its control without mount propagation, which
// misses it; and nodevol-csi on the stock kubelet: deploy/csi
// applied through the API, a NAS inside its Default inline volume kept
// across a driver restart, the volume gone once the NAS is; and the node's
// kubelet binary replaced in place, each way, without a drain, while pods
// with every kind of volume the emptyDir plugin serves run.
//
//	go run ./hack/e2e -stock KUBELET -nodevol KUBELET -apiserver KUBE-APISERVER [-run REGEXP] [-timeout 15m] [-workdir DIR] [-nodevol-image FILE] [-deploy DIR] [-csi-image FILE] [-csi-deploy DIR]
//
// (as root, from the kubelet/ directory). It installs containerd, runc,
// busybox-static and etcd-server with apt-get when missing, builds a pause
// image and a busybox image as OCI layout tarballs (no registry), and
// re-executes itself as PID 1 of the new namespaces, where it runs a
// one-node control plane (etcd and the kube-apiserver of the same
// Kubernetes version) and, against it, containerd and each kubelet in
// turn. A watchdog kills the namespace after -timeout. The host
// must look the same afterwards (mounts, processes, cgroups, directories,
// sysctls); anything left fails the run.
//
// It prints one row per scenario and kubelet, and exits 0 only when every
// nodevol row is as expected and every stock row shows the peer result
// (the stock kubelet deleting the NAS's sentinel is the expected stock
// result); 1 when a row is not; 2 when the harness itself failed.
package main

import (
	"os"

	"github.com/nodevol/nodevol/kubelet/hack/internal/harness"
)

func main() {
	os.Exit(harness.E2E(os.Args[1:], os.Stdout, os.Stderr))
}
