package agent

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/nodevol/nodevol/httpserver/kubeauth"
	"github.com/nodevol/nodevol/internal/base/promtext"
	"github.com/nodevol/nodevol/internal/cli"
	"github.com/nodevol/nodevol/mountdetect"
)

// serveMetrics are serve's metrics, on a registry of its own. Gauges
// describe the last successful scan; a failed scan leaves them as they
// were and counts an error. They are promtext's, not client_golang's: the
// nodevol binary's every command would otherwise pay client_golang's
// initialisation at start (docs/benchmarks.md).
type serveMetrics struct {
	reg         *promtext.Registry
	volumes     *promtext.GaugeVec
	danger      *promtext.Gauge
	nested      *promtext.GaugeVec
	leftovers   *promtext.Gauge
	problems    *promtext.Gauge
	incomplete  *promtext.Gauge
	overBudget  *promtext.Gauge
	duration    *promtext.Histogram
	scans       *promtext.Counter
	errors      *promtext.Counter
	lastScan    *promtext.Gauge
	lastSuccess *promtext.Gauge
	mountNS     *promtext.GaugeVec
	visible     *promtext.Gauge
	buildInfo   *promtext.GaugeVec
}

func newServeMetrics(reg *promtext.Registry, hostRoot string, v *cli.VersionInfo) (*serveMetrics, error) {
	const ns = "nodevol"
	// Every scan metric says which kubelet root it is about, as the host
	// names it.
	root := promtext.Labels{"root": hostRoot}
	m := &serveMetrics{reg: reg}
	var errs []error
	gauge := func(g **promtext.Gauge, o promtext.Opts, l promtext.Labels) {
		var err error
		*g, err = promtext.NewGauge(o, l)
		errs = append(errs, err)
	}
	gaugeVec := func(g **promtext.GaugeVec, o promtext.Opts, l promtext.Labels, names ...string) {
		var err error
		*g, err = promtext.NewGaugeVec(o, l, names...)
		errs = append(errs, err)
	}
	counter := func(c **promtext.Counter, o promtext.Opts, l promtext.Labels) {
		var err error
		*c, err = promtext.NewCounter(o, l)
		errs = append(errs, err)
	}
	gaugeVec(&m.volumes, promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "volumes",
		Help: "Volumes found by the last successful scan, by plugin, verdict (ok, in-use, danger, unknown, error) and reason code."},
		root, "plugin", "verdict", "reason")
	// The sum of the danger series of volumes, always exported (0 when
	// there is none) so that an alert has a series to compare.
	gauge(&m.danger, promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "danger_volumes",
		Help: "Volumes in danger in the last successful scan (a foreign mount inside or on a volume directory)."}, root)
	gaugeVec(&m.nested, promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "nested_mounts",
		Help: "Foreign mounts nested inside volume directories in the last successful scan, by plugin."},
		root, "plugin")
	gauge(&m.leftovers, promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "leftovers",
		Help: "Leftover pod directories found by the last successful scan."}, root)
	gauge(&m.problems, promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "problems",
		Help: "Entries under the kubelet root that do not parse or could not be read, in the last successful scan."}, root)
	// Always exported, like danger: an alert on danger alone is blind to
	// what a scan did not examine.
	gauge(&m.incomplete, promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "incomplete",
		Help: "1 when the last successful scan stopped at a bound somewhere (a pod over its budget of entries, or a pods directory past its bound): what is past it was not examined, and a volume in danger there is not counted. 0 when it examined everything."}, root)
	gauge(&m.overBudget, promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "pods_over_budget",
		Help: "Pods the last successful scan did not examine in full: over their budget of entries, or past a directory's bound (each also counts among the problems)."}, root)
	var err error
	m.duration, err = promtext.NewHistogram(promtext.Opts{Namespace: ns, Subsystem: "scan", Name: "duration_seconds",
		Help: "Duration of scans, successful or not."}, root,
		[]float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10})
	errs = append(errs, err)
	counter(&m.scans, promtext.Opts{Namespace: ns, Name: "scans_total",
		Help: "Scans run, successful or not."}, root)
	counter(&m.errors, promtext.Opts{Namespace: ns, Name: "scan_errors_total",
		Help: "Scans that failed (the kubelet root or the mount table could not be read)."}, root)
	gauge(&m.lastScan, promtext.Opts{Namespace: ns, Name: "last_scan_timestamp_seconds",
		Help: "When the last scan, successful or not, started (Unix time)."}, root)
	gauge(&m.lastSuccess, promtext.Opts{Namespace: ns, Name: "last_successful_scan_timestamp_seconds",
		Help: "When the last successful scan started (Unix time)."}, root)
	gaugeVec(&m.mountNS, promtext.Opts{Namespace: ns, Name: "mount_namespace",
		Help: "1 for the state of this process's mount namespace: host, foreign or unknown. Anything but host means a mount made only in the host's namespace is not seen."},
		nil, "state")
	gauge(&m.visible, promtext.Opts{Namespace: ns, Name: "host_mounts_visible",
		Help: "1 when mounts made on the host under the kubelet root are seen by this process: it runs in the host's mount namespace, or the root is on a mount that receives the host's mounts (a hostPath with mountPropagation HostToContainer). 0: a NAS mounted into a running pod's volume may be missed."}, root)
	gaugeVec(&m.buildInfo, promtext.Opts{Namespace: ns, Name: "build_info",
		Help: "Always 1; the labels are nodevol's build (as \"nodevol version\" reports it)."},
		nil, "version", "revision", "goversion")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := reg.Register(m.volumes, m.danger, m.nested, m.leftovers, m.problems, m.incomplete, m.overBudget,
		m.duration, m.scans, m.errors, m.lastScan, m.lastSuccess, m.visible, m.mountNS, m.buildInfo); err != nil {
		return nil, err
	}
	rev := ""
	if v.Revision != nil {
		rev = *v.Revision
	}
	for _, l := range []string{v.Version, rev, v.GoVersion} {
		if !utf8.ValidString(l) {
			return nil, fmt.Errorf("build info %q: %w", l, promtext.ErrInvalidLabel)
		}
	}
	m.buildInfo.Set(1, v.Version, rev, v.GoVersion)
	return m, nil
}

// newAuthRequestsCounter registers on reg the counter of the secure
// /metrics endpoint's requests, nodevol_metrics_auth_requests_total{result}
// (every result exported from the start, at 0), and returns what counts
// one.
func newAuthRequestsCounter(reg *promtext.Registry) (func(kubeauth.Result), error) {
	c, err := promtext.NewCounterVec(promtext.Opts{Namespace: "nodevol", Name: kubeauth.RequestsMetric, Help: kubeauth.RequestsHelp}, nil, "result")
	if err != nil {
		return nil, err
	}
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	for _, r := range kubeauth.Results() {
		c.Add(0, string(r))
	}
	return func(r kubeauth.Result) { c.Inc(string(r)) }, nil
}

// setNamespace sets the mount namespace gauge: 1 for state, 0 for the others.
func (m *serveMetrics) setNamespace(state mountdetect.MountNamespaceState) {
	for _, s := range []mountdetect.MountNamespaceState{mountdetect.MountNamespaceHost, mountdetect.MountNamespaceForeign, mountdetect.MountNamespaceUnknown} {
		v := 0.0
		if s == state {
			v = 1
		}
		m.mountNS.Set(v, s.String())
	}
}

// setVisible sets nodevol_host_mounts_visible.
func (m *serveMetrics) setVisible(visible bool) {
	v := 0.0
	if visible {
		v = 1
	}
	m.visible.Set(v)
}

// observe records one scan that started at start and took took, all at
// once for a scrape: the danger gauge and the series it sums always come
// from the same scan.
func (m *serveMetrics) observe(rep *cli.ScanReport, err error, took time.Duration, start time.Time) {
	m.reg.Together(func() { m.record(rep, err, took, start) })
}

func (m *serveMetrics) record(rep *cli.ScanReport, err error, took time.Duration, start time.Time) {
	m.scans.Inc()
	m.duration.Observe(took.Seconds())
	m.lastScan.Set(float64(start.UnixNano()) / 1e9)
	if err != nil {
		m.errors.Inc()
		return
	}
	m.lastSuccess.Set(float64(start.UnixNano()) / 1e9)
	m.volumes.Reset()
	m.nested.Reset()
	danger := 0
	for i := range rep.Volumes() {
		v := rep.Volumes()[i]
		plugin := pluginLabel(v.Plugin)
		m.volumes.Add(1, plugin, v.Verdict.String(), v.ReasonCode.String())
		if v.Verdict == cli.VerdictDanger {
			danger++
		}
		if n := len(v.NestedMounts); n > 0 {
			m.nested.Add(float64(n), plugin)
		}
	}
	m.danger.Set(float64(danger))
	m.leftovers.Set(float64(rep.Leftovers()))
	m.problems.Set(float64(len(rep.Problems())))
	incomplete := 0.0
	if rep.Incomplete() {
		incomplete = 1
	}
	m.incomplete.Set(incomplete)
	m.overBudget.Set(float64(rep.OverBudget()))
}

// knownPlugin says whether plugin's name is a plugin label value: the
// kubelet's in-tree volume plugins and CSI. The name of a plugin directory
// is whatever whoever can write into a pod directory made it, so any
// other name is folded into otherPlugin: one new directory must not make
// one new series on every scrape of every node. The log names the plugin
// of every unhealthy volume. A switch, not a map: a map literal is built
// at every start of every command.
func knownPlugin(plugin string) bool {
	switch plugin {
	case "kubernetes.io/empty-dir", "kubernetes.io/secret", "kubernetes.io/configmap", "kubernetes.io/projected",
		"kubernetes.io/downward-api", "kubernetes.io/csi", "kubernetes.io/nfs", "kubernetes.io/host-path",
		"kubernetes.io/local-volume", "kubernetes.io/iscsi", "kubernetes.io/fc", "kubernetes.io/rbd",
		"kubernetes.io/cephfs", "kubernetes.io/git-repo", "kubernetes.io/portworx-volume", "kubernetes.io/aws-ebs",
		"kubernetes.io/gce-pd", "kubernetes.io/azure-disk", "kubernetes.io/azure-file", "kubernetes.io/vsphere-volume",
		"kubernetes.io/cinder", "kubernetes.io/glusterfs":
		return true
	}
	return false
}

// otherPlugin is the plugin label of every plugin knownPlugin does not know
// (FlexVolume drivers, and directories nobody's plugin made).
const otherPlugin = "other"

// pluginLabel is the plugin label value of plugin.
func pluginLabel(plugin string) string {
	if knownPlugin(plugin) {
		return plugin
	}
	return otherPlugin
}
