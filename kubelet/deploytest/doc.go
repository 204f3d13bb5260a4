// Package deploytest checks the manifests under deploy/ offline, the way
// the API server would on `kubectl apply`, and against nodevol's own
// deployment policy. It has only tests:
//
//	cd kubelet && go test ./deploytest/
//
// Every YAML document is decoded strictly (an unknown or duplicated field
// is an error, where kubectl would at best warn), defaulted and converted
// to the internal types with a scheme of the API server's own install
// packages, and validated by k8s.io/kubernetes's validation (ValidateDaemonSet
// with the options the DaemonSet strategy uses, ValidateServiceCreate,
// ValidateNamespace, ValidateServiceAccount). The ServiceMonitor, a custom
// resource, is decoded strictly into a struct of ours that mirrors the
// fields it uses of monitoring.coreos.com/v1 (see serviceMonitor for why
// not the Prometheus Operator's own Go types).
//
// deploy/csi (nodevol-csi, a privileged CSI node plugin) is checked
// separately, with a policy of its own (csi_test.go): the CSIDriver's
// fields (ValidateCSIDriver, then what the driver serves), privileged for
// the Bidirectional propagation of the kubelet root and the three hostPaths
// it needs and nothing else, and the args parsed by a flag set built from
// nodevol-csi's own flag definitions (read from its source: the csi/ module
// is not a dependency of this one), so a misspelt or missing flag fails.
// Both are validated as by an API server run with --allow-privileged=true.
//
// deploy/ is generated from the Helm chart deploy/helm/nodevol
// (kubelet/helmchart); chart_test.go checks that it is the chart's default
// render byte for byte, lints the chart with Helm's own linter, and
// applies every check above to renders with the default and with
// non-default values.
//
// TestDaemonSetPrivilegeSuffices then runs nodevol itself with exactly the
// DaemonSet's uid and capabilities (setpriv, as root, in a private mount
// namespace) against a kubelet root that needs them.
//
// It lives in the kubelet/ module because k8s.io/kubernetes may not enter
// the root module.
package deploytest
