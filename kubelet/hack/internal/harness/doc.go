// Package harness runs real kubelets in private namespaces: the
// containment (a re-executed PID 1 of new mount, pid and network
// namespaces, the host lock, the before/after host check), Debian's
// runtime packages, images without a registry, a control plane, and
// clusters of one or two nodes on a bridge network. Two commands drive it:
// kubelet/hack/e2e (nodevol's scenarios, Kubernetes's own e2e specs, and
// deploy/ applied through the API; docs/e2e.md, docs/conformance.md) and
// kubelet/hack/soak (churn and faults for a chosen duration;
// docs/reliability.md).
package harness
