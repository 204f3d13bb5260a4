// Package monitoring has only tests: nodevol's alerts (the PrometheusRule
// of deploy/prometheus-operator, which the Helm chart renders) evaluated
// by Prometheus's own rule engine against metrics scraped from a real
// nodevol serve and a real nodevol-csi, and the Grafana dashboard's
// queries checked against the metrics they export.
//
//	cd monitoring && go test ./...
//
// The agent and the driver are built from this repository (go build in
// the root and csi/ modules) and run as root in a private mount
// namespace, on a kubelet root of the test's own: one node that is
// healthy, where every alert must stay silent, and nodes where each
// alert's condition is real (a tmpfs "NAS" in a pod's emptyDir, a refused
// NodeUnpublishVolume, a scan that fails or is incomplete, a root that
// does not receive the host's mounts).
//
// The kubelet's alert is evaluated on what real kubelets (v1.37.2, stock
// and nodevol's) wrote on /metrics in the e2e's scenario 1-nas-tmpfs,
// kept in testdata/kubelet (its README says how it was captured and how
// to capture it again): before the pod's deletion, during its refused
// (retried) teardown, after it. The e2e checks on every run that the
// series the rule selects is still there and grows with the retries.
package monitoring
