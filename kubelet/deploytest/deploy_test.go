package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	appsinstall "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	coreinstall "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/storage"
	storageinstall "k8s.io/kubernetes/pkg/apis/storage/install"
	storagevalidation "k8s.io/kubernetes/pkg/apis/storage/validation"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/nodevol/nodevol/internal/agent"
)

// deployDir is deploy/ at the repository's root; the exporter's manifests
// are there and in its subdirectories but csiDir, nodevol-csi's (checked
// by csi_test.go with a policy of its own), secureMetricsDir, the RBAC
// of secure metrics serving, which kubelet/hack/internal/harness's
// TestSecureMetricsAgainstAPIServer applies to a real API server and
// uses, and chartDir, the Helm chart they are all generated from
// (chart_test.go).
const (
	deployDir        = "../../deploy"
	csiDir           = "csi"
	secureMetricsDir = "secure-metrics"
	chartDir         = "helm"
)

// doc is one YAML document of a manifest file.
type doc struct {
	file  string // relative to deploy/
	index int    // 0-based, in its file
	data  []byte
}

func (d doc) String() string { return fmt.Sprintf("%s#%d", d.file, d.index) }

// readManifests reads every .yaml and .yml file under dir, split into
// documents, except under the subdirectories skip names (relative to dir,
// slash-separated), which hold manifests with a policy of their own;
// documents that hold only comments are left out.
func readManifests(dir string, skip ...string) ([]doc, error) {
	var docs []doc
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel, err := filepath.Rel(dir, p); err == nil && slices.Contains(skip, filepath.ToSlash(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
			return fmt.Errorf("%s: not a .yaml manifest: `kubectl apply -f deploy/` would skip it (docs go in docs/deploy.md)", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		more, err := splitDocs(filepath.ToSlash(rel), b)
		docs = append(docs, more...)
		return err
	})
	return docs, err
}

// splitDocs splits the text of a manifest file into its documents,
// leaving out those that hold only comments.
func splitDocs(file string, b []byte) ([]doc, error) {
	var docs []doc
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 0; ; i++ {
		data, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, fmt.Errorf("%s: %w", file, err)
		}
		if onlyComments(data) {
			i--
			continue
		}
		docs = append(docs, doc{file: file, index: i, data: data})
	}
}

func onlyComments(data []byte) bool {
	for line := range strings.SplitSeq(string(data), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

// apiServer decodes and validates built-in objects as the API server
// does: strict decoding, defaulting, conversion to the internal version,
// validation. Its scheme is its own, filled by the API server's install
// packages (no global scheme).
type apiServer struct {
	scheme *runtime.Scheme
	decode runtime.Decoder
}

func newAPIServer() *apiServer {
	scheme := runtime.NewScheme()
	coreinstall.Install(scheme)
	appsinstall.Install(scheme)
	storageinstall.Install(scheme)
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	return &apiServer{scheme: scheme, decode: codecs.UniversalDeserializer()}
}

// objects is what the manifests hold, as the API server would store them
// (defaulted, in their versioned types), each with the document it came from.
type objects struct {
	namespaces      map[*corev1.Namespace]doc
	serviceAccounts map[*corev1.ServiceAccount]doc
	daemonSets      map[*appsv1.DaemonSet]doc
	services        map[*corev1.Service]doc
	serviceMonitors map[*serviceMonitor]doc
	prometheusRules map[*prometheusRule]doc
	podMonitors     map[*podMonitor]doc
	configMaps      map[*corev1.ConfigMap]doc
	csiDrivers      map[*storagev1.CSIDriver]doc
}

// load decodes and validates every document; it returns every error, each
// naming its document.
func (s *apiServer) load(docs []doc) (*objects, []error) {
	objs := &objects{
		namespaces:      map[*corev1.Namespace]doc{},
		serviceAccounts: map[*corev1.ServiceAccount]doc{},
		daemonSets:      map[*appsv1.DaemonSet]doc{},
		services:        map[*corev1.Service]doc{},
		serviceMonitors: map[*serviceMonitor]doc{},
		prometheusRules: map[*prometheusRule]doc{},
		podMonitors:     map[*podMonitor]doc{},
		configMaps:      map[*corev1.ConfigMap]doc{},
		csiDrivers:      map[*storagev1.CSIDriver]doc{},
	}
	var errs []error
	for _, d := range docs {
		if err := s.loadOne(d, objs); err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", d, err))
		}
	}
	return objs, errs
}

func (s *apiServer) loadOne(d doc, objs *objects) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(d.data, &tm); err != nil {
		return err
	}
	if tm.APIVersion == serviceMonitorAPIVersion {
		switch tm.Kind {
		case "ServiceMonitor":
			return keepDecoded(d, decodeServiceMonitor, objs.serviceMonitors)
		case "PodMonitor":
			return keepDecoded(d, decodePodMonitor, objs.podMonitors)
		case "PrometheusRule":
			return keepDecoded(d, decodePrometheusRule, objs.prometheusRules)
		}
	}
	obj, gvk, err := s.decode.Decode(d.data, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding %s: %w", tm.GroupVersionKind(), err)
	}
	s.scheme.Default(obj)
	internal, err := s.scheme.ConvertToVersion(obj, schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		return fmt.Errorf("converting %s: %w", gvk, err)
	}
	var errs field.ErrorList
	switch in := internal.(type) {
	case *core.Namespace:
		errs = corevalidation.ValidateNamespace(in)
		objs.namespaces[obj.(*corev1.Namespace)] = d
	case *core.ConfigMap:
		errs = corevalidation.ValidateConfigMap(in)
		objs.configMaps[obj.(*corev1.ConfigMap)] = d
	case *core.ServiceAccount:
		errs = corevalidation.ValidateServiceAccount(in)
		objs.serviceAccounts[obj.(*corev1.ServiceAccount)] = d
	case *core.Service:
		// The Service storage's create first fills the plural clusterIPs
		// from the singular field (normalizeClusterIPs), which validation
		// then requires; the IP allocator fills nothing for a headless one.
		if in.Spec.ClusterIP != "" && len(in.Spec.ClusterIPs) == 0 {
			in.Spec.ClusterIPs = []string{in.Spec.ClusterIP}
		}
		errs = corevalidation.ValidateServiceCreate(in)
		objs.services[obj.(*corev1.Service)] = d
	case *apps.DaemonSet:
		// As the DaemonSet strategy's Validate does on create.
		errs = appsvalidation.ValidateDaemonSet(in, pod.GetValidationOptionsFromPodTemplate(&in.Spec.Template, nil))
		objs.daemonSets[obj.(*appsv1.DaemonSet)] = d
	case *storage.CSIDriver:
		// The CSIDriver strategy's PrepareForCreate only clears fields of
		// disabled features; its Validate is this.
		errs = storagevalidation.ValidateCSIDriver(in)
		objs.csiDrivers[obj.(*storagev1.CSIDriver)] = d
	default:
		return fmt.Errorf("%s: no validation here for this kind; add it to loadOne", gvk)
	}
	return errs.ToAggregate()
}

// keepDecoded decodes d, a Prometheus Operator object the API server has
// no schema for here, with decode (which checks what the operator's CRD
// would), and keeps it in into.
func keepDecoded[T any](d doc, decode func([]byte) (*T, error), into map[*T]doc) error {
	v, err := decode(d.data)
	if err != nil {
		return err
	}
	into[v] = d
	return nil
}

// serviceMonitorAPIVersion is the Prometheus Operator's API.
const serviceMonitorAPIVersion = "monitoring.coreos.com/v1"

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor
// that deploy/ uses, field names and types as the operator's CRD has them;
// a field it does not list is an error. Not the operator's own Go types
// (github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring):
// requiring that module raises k8s.io/kube-openapi and fxamacker/cbor
// under k8s.io/kubernetes v1.37.2, which would change what the
// nodevol-kubelet build links, for the sake of one test.
type serviceMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string              `json:"port,omitempty"`
			TargetPort    *intstr.IntOrString `json:"targetPort,omitempty"`
			Path          string              `json:"path,omitempty"`
			Scheme        string              `json:"scheme,omitempty"`
			Interval      string              `json:"interval,omitempty"`
			ScrapeTimeout string              `json:"scrapeTimeout,omitempty"`
			HonorLabels   bool                `json:"honorLabels,omitempty"`
			// BearerTokenFile and TLSConfig: how Prometheus scrapes an
			// endpoint served securely (docs/metrics.md).
			BearerTokenFile string `json:"bearerTokenFile,omitempty"`
			TLSConfig       *struct {
				InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
				CAFile             string `json:"caFile,omitempty"`
				ServerName         string `json:"serverName,omitempty"`
			} `json:"tlsConfig,omitempty"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels,omitempty"`
				Separator    *string  `json:"separator,omitempty"`
				TargetLabel  string   `json:"targetLabel,omitempty"`
				Regex        string   `json:"regex,omitempty"`
				Replacement  *string  `json:"replacement,omitempty"`
				Action       string   `json:"action,omitempty"`
			} `json:"relabelings,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// podMonitor is the part of monitoring.coreos.com/v1 PodMonitor that
// deploy/ uses (nodevol-csi's, which has no Service), as serviceMonitor.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port          string `json:"port,omitempty"`
			Path          string `json:"path,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			Relabelings   []struct {
				SourceLabels []string `json:"sourceLabels,omitempty"`
				TargetLabel  string   `json:"targetLabel,omitempty"`
			} `json:"relabelings,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

func decodePodMonitor(data []byte) (*podMonitor, error) {
	var pm podMonitor
	if err := yaml.UnmarshalStrict(data, &pm); err != nil {
		return nil, fmt.Errorf("decoding PodMonitor: %w", err)
	}
	var errs field.ErrorList
	if pm.Metadata.Name == "" || pm.Metadata.Namespace == "" {
		errs = append(errs, field.Required(field.NewPath("metadata"), "name and namespace"))
	}
	spec := field.NewPath("spec")
	if len(pm.Spec.Selector.MatchLabels) == 0 && len(pm.Spec.Selector.MatchExpressions) == 0 {
		errs = append(errs, field.Required(spec.Child("selector"), "an empty selector selects every pod"))
	}
	if len(pm.Spec.PodMetricsEndpoints) == 0 {
		errs = append(errs, field.Required(spec.Child("podMetricsEndpoints"), ""))
	}
	for i, e := range pm.Spec.PodMetricsEndpoints {
		p := spec.Child("podMetricsEndpoints").Index(i)
		if e.Port == "" {
			errs = append(errs, field.Required(p.Child("port"), ""))
		}
		for name, d := range map[string]string{"interval": e.Interval, "scrapeTimeout": e.ScrapeTimeout} {
			if d != "" && !promDuration.MatchString(d) {
				errs = append(errs, field.Invalid(p.Child(name), d, "not a Prometheus duration"))
			}
		}
		for j, r := range e.Relabelings {
			if r.TargetLabel != "" && !labelName.MatchString(r.TargetLabel) {
				errs = append(errs, field.Invalid(p.Child("relabelings").Index(j).Child("targetLabel"), r.TargetLabel, "not a label name"))
			}
		}
	}
	return &pm, errs.ToAggregate()
}

// podMonitorErrors checks that each PodMonitor scrapes the driver: in its
// namespace, selecting its pods, on a port its container names, at
// /metrics.
func podMonitorErrors(pms map[*podMonitor]doc, driver *objects) []error {
	var errs []error
	for pm, d := range pms {
		found := false
		for ds := range driver.daemonSets {
			if ds.Namespace != pm.Metadata.Namespace || !selects(pm.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
				continue
			}
			found = true
			for _, e := range pm.Spec.PodMetricsEndpoints {
				if !slices.ContainsFunc(ds.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == e.Port }) || e.Path != "/metrics" {
					errs = append(errs, fmt.Errorf("%v: PodMonitor %s: endpoint port %q path %q; want a port of DaemonSet %s's container, /metrics", d, pm.Metadata.Name, e.Port, e.Path, ds.Name))
				}
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%v: PodMonitor %s in %q selects no pods of the driver's DaemonSet", d, pm.Metadata.Name, pm.Metadata.Namespace))
		}
	}
	return errs
}

// prometheusRule is monitoring.coreos.com/v1 PrometheusRule, field names
// and types as the operator's CRD has them; a field it does not list is
// an error. The expressions are PromQL, which this module cannot parse
// (Prometheus is not a dependency of it): monitoring/ evaluates them with
// Prometheus's own rule engine.
type prometheusRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []struct {
				Alert         string             `json:"alert,omitempty"`
				Record        string             `json:"record,omitempty"`
				Expr          intstr.IntOrString `json:"expr"`
				For           string             `json:"for,omitempty"`
				KeepFiringFor string             `json:"keep_firing_for,omitempty"`
				Labels        map[string]string  `json:"labels,omitempty"`
				Annotations   map[string]string  `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// alertName is the CRD's and Prometheus's pattern of a metric or alert name.
var alertName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

func decodePrometheusRule(data []byte) (*prometheusRule, error) {
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		return nil, fmt.Errorf("decoding PrometheusRule: %w", err)
	}
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if pr.Metadata.Name == "" || pr.Metadata.Namespace == "" {
		errs = append(errs, field.Required(meta, "name and namespace"))
	}
	groups := field.NewPath("spec", "groups")
	if len(pr.Spec.Groups) == 0 {
		errs = append(errs, field.Required(groups, ""))
	}
	names := map[string]bool{}
	for i, g := range pr.Spec.Groups {
		p := groups.Index(i)
		if g.Name == "" || names[g.Name] {
			errs = append(errs, field.Invalid(p.Child("name"), g.Name, "empty or not unique"))
		}
		names[g.Name] = true
		if g.Interval != "" && !promDuration.MatchString(g.Interval) {
			errs = append(errs, field.Invalid(p.Child("interval"), g.Interval, "not a Prometheus duration"))
		}
		if len(g.Rules) == 0 {
			errs = append(errs, field.Required(p.Child("rules"), ""))
		}
		for j, r := range g.Rules {
			rp := p.Child("rules").Index(j)
			if (r.Alert == "") == (r.Record == "") || !alertName.MatchString(r.Alert+r.Record) {
				errs = append(errs, field.Invalid(rp, r.Alert+r.Record, "exactly one of alert and record, a metric name"))
			}
			if r.Expr.String() == "" {
				errs = append(errs, field.Required(rp.Child("expr"), ""))
			}
			for name, d := range map[string]string{"for": r.For, "keep_firing_for": r.KeepFiringFor} {
				if d != "" && !promDuration.MatchString(d) {
					errs = append(errs, field.Invalid(rp.Child(name), d, "not a Prometheus duration"))
				}
			}
			for k := range r.Labels {
				if !labelName.MatchString(k) {
					errs = append(errs, field.Invalid(rp.Child("labels"), k, "not a label name"))
				}
			}
		}
	}
	return &pr, errs.ToAggregate()
}

// Patterns of the operator's CRD schema, and of Prometheus label names.
var (
	promDuration = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)
	labelName    = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

func decodeServiceMonitor(data []byte) (*serviceMonitor, error) {
	var sm serviceMonitor
	if err := yaml.UnmarshalStrict(data, &sm); err != nil {
		return nil, fmt.Errorf("decoding ServiceMonitor: %w", err)
	}
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if sm.Metadata.Name == "" || sm.Metadata.Namespace == "" {
		errs = append(errs, field.Required(meta, "name and namespace"))
	}
	spec := field.NewPath("spec")
	if len(sm.Spec.Selector.MatchLabels) == 0 && len(sm.Spec.Selector.MatchExpressions) == 0 {
		errs = append(errs, field.Required(spec.Child("selector"), "an empty selector selects every Service"))
	}
	if len(sm.Spec.Endpoints) == 0 {
		errs = append(errs, field.Required(spec.Child("endpoints"), ""))
	}
	for i, e := range sm.Spec.Endpoints {
		p := spec.Child("endpoints").Index(i)
		if (e.Port == "") == (e.TargetPort == nil) {
			errs = append(errs, field.Invalid(p, e.Port, "exactly one of port and targetPort"))
		}
		for name, d := range map[string]string{"interval": e.Interval, "scrapeTimeout": e.ScrapeTimeout} {
			if d != "" && !promDuration.MatchString(d) {
				errs = append(errs, field.Invalid(p.Child(name), d, "not a Prometheus duration"))
			}
		}
		for j, r := range e.Relabelings {
			if r.TargetLabel != "" && !labelName.MatchString(r.TargetLabel) {
				errs = append(errs, field.Invalid(p.Child("relabelings").Index(j).Child("targetLabel"), r.TargetLabel, "not a label name"))
			}
		}
	}
	return &sm, errs.ToAggregate()
}

// policyErrors checks what nodevol's deployment promises beyond what the
// API server checks: least privilege, the kubelet root read-only with
// HostToContainer propagation, serve's own flags, probes on its
// endpoints, every node, and a scrape path that reaches the pods.
func policyErrors(objs *objects) []error {
	var errs []error
	bad := func(d doc, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%v: %s", d, fmt.Sprintf(format, a...)))
	}
	if len(objs.namespaces) != 1 || len(objs.daemonSets) != 1 || len(objs.services) != 1 || len(objs.serviceAccounts) != 1 || len(objs.serviceMonitors) != 1 || len(objs.prometheusRules) != 1 || len(objs.csiDrivers) != 0 {
		errs = append(errs, fmt.Errorf("deploy/ holds %d Namespaces, %d ServiceAccounts, %d DaemonSets, %d Services, %d ServiceMonitors, %d PrometheusRules, %d CSIDrivers; want one of each but no CSIDriver (deploy/csi/)",
			len(objs.namespaces), len(objs.serviceAccounts), len(objs.daemonSets), len(objs.services), len(objs.serviceMonitors), len(objs.prometheusRules), len(objs.csiDrivers)))
		return errs
	}
	var ns string
	for n := range objs.namespaces {
		ns = n.Name
	}
	secure := secureMetrics(objs)
	for pr, d := range objs.prometheusRules {
		if pr.Metadata.Namespace != ns {
			bad(d, "PrometheusRule %s: namespace %q; want %q", pr.Metadata.Name, pr.Metadata.Namespace, ns)
		}
	}
	for sa, d := range objs.serviceAccounts {
		if sa.Namespace != ns {
			bad(d, "namespace %q; want %q", sa.Namespace, ns)
		}
		switch automount := sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken; {
		case automount && !secure:
			bad(d, "automountServiceAccountToken is not false: without --secure-metrics-listen the agent never talks to the API server")
		case !automount && secure:
			bad(d, "automountServiceAccountToken false: with --secure-metrics-listen the agent asks the API server about its scrapers, with its token")
		}
	}
	for ds, d := range objs.daemonSets {
		errs = append(errs, daemonSetPolicy(ds, d, ns, objs)...)
		for n := range objs.namespaces {
			errs = append(errs, podSecurityErrors(ds, d, n, restrictedExceptions)...)
		}
	}
	return errs
}

// restrictedExceptions are the Pod Security Standard checks the exporter's pod fails
// at "restricted", each for a privilege docs/deploy.md explains: the
// kubelet root's hostPath (also outside "baseline"), uid 0, and
// DAC_READ_SEARCH. Any other failure (a host port, AppArmor Unconfined,
// an unmasked /proc, host namespaces, ...) is a privilege nobody argued for.
var restrictedExceptions = []string{
	"hostPath volumes",
	"restricted volume types",
	"runAsNonRoot != true",
	"runAsUser=0",
	"unrestricted capabilities",
}

// podSecurityErrors evaluates the pod template with the PodSecurity
// admission's own checks: the Namespace's enforce level must admit it
// (or `kubectl apply` creates a DaemonSet whose pods are all refused),
// and at "restricted" it may fail only the checks exceptions names (each
// a privilege docs/deploy.md explains).
func podSecurityErrors(ds *appsv1.DaemonSet, d doc, ns *corev1.Namespace, exceptions []string) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%v: DaemonSet %s: %s", d, ds.Name, fmt.Sprintf(format, a...)))
	}
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		return []error{err}
	}
	forbidden := func(level psaapi.Level) []string {
		var reasons []string
		for _, r := range eval.EvaluatePod(psaapi.LevelVersion{Level: level, Version: psaapi.LatestVersion()}, &ds.Spec.Template.ObjectMeta, &ds.Spec.Template.Spec) {
			if !r.Allowed {
				reasons = append(reasons, r.ForbiddenReason+" ("+r.ForbiddenDetail+")")
			}
		}
		return reasons
	}
	enforce, err := psaapi.ParseLevel(ns.Labels[psaapi.EnforceLevelLabel])
	if err != nil {
		bad("Namespace %s: label %s=%q: %v", ns.Name, psaapi.EnforceLevelLabel, ns.Labels[psaapi.EnforceLevelLabel], err)
	} else if r := forbidden(enforce); len(r) > 0 {
		bad("Namespace %s enforces Pod Security %q, which refuses the pods: %s", ns.Name, enforce, strings.Join(r, "; "))
	}
	for _, r := range forbidden(psaapi.LevelRestricted) {
		if !slices.ContainsFunc(exceptions, func(e string) bool { return strings.HasPrefix(r, e+" (") }) {
			bad("Pod Security \"restricted\" forbids %s: a privilege docs/deploy.md does not explain", r)
		}
	}
	return errs
}

// probesAndResources checks a container's probes — liveness /healthz and
// readiness /readyz, HTTP GETs on its port named portName (or its number,
// port) — and its resources: CPU and memory requests, a memory limit, no
// CPU limit.
func probesAndResources(c *corev1.Container, portName, port string, bad func(string, ...any)) {
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || (p.HTTPGet.Port != intstr.FromString(portName) && p.HTTPGet.Port.String() != port) {
			bad("%s probe %+v; want an HTTP GET of %s on the %s port", name, p, path, portName)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() || !r.Limits.Cpu().IsZero() {
		bad("resources %+v; want CPU and memory requests, a memory limit and no CPU limit", r)
	}
}

// daemonSetBasics are the checks every DaemonSet of deploy/ passes: its
// namespace and service account, no token, no host namespaces, a
// toleration of every taint (noTaints says why it needs one), and a
// rolling update with maxUnavailable; and one container, with a security
// context, which it returns (nil when there is not).
// secureMetrics reports whether the agent's DaemonSet serves /metrics
// securely (a non-empty --secure-metrics-listen).
func secureMetrics(objs *objects) bool {
	for ds := range objs.daemonSets {
		for _, c := range ds.Spec.Template.Spec.Containers {
			if len(c.Args) > 0 && argValues(c.Args[1:])["secure-metrics-listen"] != "" {
				return true
			}
		}
	}
	return false
}

// daemonSetBasics checks what every DaemonSet of deploy/ must be; token
// is whether its pods mount their ServiceAccount token (only to review
// scrapers of secure metrics).
func daemonSetBasics(ds *appsv1.DaemonSet, ns string, objs *objects, noTaints string, token bool, bad func(string, ...any)) *corev1.Container {
	if ds.Namespace != ns {
		bad("namespace %q; want %q", ds.Namespace, ns)
	}
	spec := &ds.Spec.Template.Spec
	for sa := range objs.serviceAccounts {
		if spec.ServiceAccountName != sa.Name {
			bad("serviceAccountName %q; want %q", spec.ServiceAccountName, sa.Name)
		}
	}
	if automount := spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken; automount != token {
		bad("automountServiceAccountToken %v; want %v (the token only serves to review the scrapers of secure metrics)", automount, token)
	}
	if spec.HostPID || spec.HostNetwork || spec.HostIPC {
		bad("hostPID %v, hostNetwork %v, hostIPC %v; want none", spec.HostPID, spec.HostNetwork, spec.HostIPC)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == ""
	}) {
		bad("no toleration {operator: Exists}: %s", noTaints)
	}
	if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil || u.RollingUpdate.MaxUnavailable == nil {
		bad("updateStrategy %+v; want RollingUpdate with maxUnavailable", u)
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		bad("%d containers, %d init containers; want one container", len(spec.Containers), len(spec.InitContainers))
		return nil
	}
	c := &spec.Containers[0]
	if c.SecurityContext == nil {
		bad("container %s has no securityContext", c.Name)
		return nil
	}
	return c
}

func daemonSetPolicy(ds *appsv1.DaemonSet, d doc, ns string, objs *objects) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%v: DaemonSet %s: %s", d, ds.Name, fmt.Sprintf(format, a...)))
	}
	c := daemonSetBasics(ds, ns, objs, "it would not run on tainted nodes and control planes", secureMetrics(objs), bad)
	if c == nil {
		return errs
	}
	spec := &ds.Spec.Template.Spec

	// Privilege.
	sc := c.SecurityContext
	isFalse := func(b *bool) bool { return b != nil && !*b }
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isFalse(sc.Privileged) || !isFalse(sc.AllowPrivilegeEscalation) || !isTrue(sc.ReadOnlyRootFilesystem) {
		bad("privileged %v, allowPrivilegeEscalation %v, readOnlyRootFilesystem %v; want false, false, true",
			ptrString(sc.Privileged), ptrString(sc.AllowPrivilegeEscalation), ptrString(sc.ReadOnlyRootFilesystem))
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"DAC_READ_SEARCH"}) {
		bad("capabilities %+v; want drop [ALL], add [DAC_READ_SEARCH] only", sc.Capabilities)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && spec.SecurityContext != nil {
		seccomp = spec.SecurityContext.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		bad("seccompProfile %+v; want RuntimeDefault", seccomp)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		bad("runAsUser %v; want 0 (the kubelet root and pod directories are root's, mode 0750)", ptrString(sc.RunAsUser))
	}

	// The image's entrypoint, /nodevol, runs serve.
	for _, e := range imageErrors(c, "nodevol") {
		bad("%s", e)
	}

	// The kubelet root.
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		bad("args %q; want serve and its flags", c.Args)
		return errs
	}
	if err := agent.CheckServeArgs(c.Args[1:]); err != nil {
		bad("%v", err)
	}
	flags := argValues(c.Args[1:])
	var volume *corev1.Volume
	for i := range spec.Volumes {
		if v := &spec.Volumes[i]; v.HostPath != nil && v.HostPath.Path == flags["host-root"] {
			volume = v
		}
	}
	if volume == nil || volume.HostPath.Type == nil || *volume.HostPath.Type != corev1.HostPathDirectory {
		bad("no hostPath volume of type Directory for --host-root=%s", flags["host-root"])
		return errs
	}
	// The kubelet root is all the pod reads: another volume (a second
	// hostPath, writable) would be a privilege the policy never looked at.
	if len(spec.Volumes) != 1 || len(c.VolumeMounts) != 1 {
		bad("%d volumes, %d volume mounts; want only the kubelet root's", len(spec.Volumes), len(c.VolumeMounts))
	}
	mounts := 0
	for _, m := range c.VolumeMounts {
		if m.Name != volume.Name {
			continue
		}
		mounts++
		if m.MountPath != flags["root"] || !m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
			bad("mount of %s at %s, readOnly %v, propagation %v; want it at --root=%s, readOnly, HostToContainer",
				volume.Name, m.MountPath, m.ReadOnly, ptrString(m.MountPropagation), flags["root"])
		}
	}
	if mounts != 1 {
		bad("the kubelet root volume is mounted %d times; want once", mounts)
	}

	// The endpoints.
	_, listenPort, err := net.SplitHostPort(flags["listen"])
	if err != nil {
		bad("--listen=%s: %v", flags["listen"], err)
	}
	var metrics *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "metrics" {
			metrics = &c.Ports[i]
		}
	}
	if metrics == nil || fmt.Sprint(metrics.ContainerPort) != listenPort {
		bad("ports %+v; want one named metrics on --listen's port %s", c.Ports, listenPort)
	}
	probesAndResources(c, "metrics", listenPort, bad)
	// With secure metrics, /metrics is on a port of its own, named
	// secure-metrics, which the Service and the ServiceMonitor scrape
	// over TLS with a bearer token.
	scrapePort, scrapeListen := "metrics", listenPort
	if addr := flags["secure-metrics-listen"]; addr != "" {
		scrapePort = "secure-metrics"
		if _, scrapeListen, err = net.SplitHostPort(addr); err != nil {
			bad("--secure-metrics-listen=%s: %v", addr, err)
		}
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == scrapePort && fmt.Sprint(p.ContainerPort) == scrapeListen
		}) {
			bad("ports %+v; want one named secure-metrics on --secure-metrics-listen's port %s", c.Ports, scrapeListen)
		}
	}

	// The Service reaches the pods' metrics port.
	for svc, sd := range objs.services {
		if svc.Namespace != ns {
			bad("Service %s (%v) is in namespace %q; want %q", svc.Name, sd, svc.Namespace, ns)
		}
		if !selects(svc.Spec.Selector, ds.Spec.Template.Labels) || len(svc.Spec.Selector) == 0 {
			bad("Service %s (%v) selector %v does not select the pods (%v)", svc.Name, sd, svc.Spec.Selector, ds.Spec.Template.Labels)
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			bad("Service %s (%v) is not headless", svc.Name, sd)
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
			return p.Name == scrapePort && (p.TargetPort == intstr.FromString(scrapePort) || p.TargetPort.String() == scrapeListen)
		}) {
			bad("Service %s (%v) has no port %s to the pods' %s port", svc.Name, sd, scrapePort, scrapePort)
		}
		for sm, smd := range objs.serviceMonitors {
			if sm.Metadata.Namespace != ns || !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
				bad("ServiceMonitor %s (%v) in %q with selector %v does not select Service %s", sm.Metadata.Name, smd, sm.Metadata.Namespace, sm.Spec.Selector.MatchLabels, svc.Name)
			}
			for _, e := range sm.Spec.Endpoints {
				if e.Port != scrapePort || e.Path != "/metrics" {
					bad("ServiceMonitor %s (%v) endpoint port %q path %q; want %s, /metrics", sm.Metadata.Name, smd, e.Port, e.Path, scrapePort)
				}
				if scrapePort == "secure-metrics" && (e.Scheme != "https" || e.BearerTokenFile == "" || e.TLSConfig == nil) {
					bad("ServiceMonitor %s (%v) endpoint scheme %q, bearerTokenFile %q, tlsConfig %v; want https, Prometheus's token and a TLS configuration for the secure metrics", sm.Metadata.Name, smd, e.Scheme, e.BearerTokenFile, e.TLSConfig)
				}
			}
		}
	}
	return errs
}

// imageErrors checks that the container runs the image's entrypoint with
// args only (a command would replace it, and the image has no shell), of
// an image whose repository's last element is repo (hack/image's name for
// that binary's image), by a version tag or a digest: a tag that moves
// (latest, none) runs whatever the node pulled last under it.
func imageErrors(c *corev1.Container, repo string) []string {
	var errs []string
	if len(c.Command) > 0 {
		errs = append(errs, fmt.Sprintf("command %q; want the image's entrypoint (args only)", c.Command))
	}
	ref, digest, _ := strings.Cut(c.Image, "@")
	name, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i >= 0 && !strings.Contains(ref[i:], "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	if digest == "" && (tag == "" || tag == "latest") {
		errs = append(errs, fmt.Sprintf("image %q; want a version tag or a digest, not latest or none", c.Image))
	}
	if name[strings.LastIndex(name, "/")+1:] != repo {
		errs = append(errs, fmt.Sprintf("image %q; want an image of repository .../%s (go run ./hack/image builds it)", c.Image, repo))
	}
	return errs
}

// argValues is the value of each --name=value flag.
func argValues(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok {
			m[k] = v
		}
	}
	return m
}

// selects reports whether every label of selector is in labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// check loads docs and applies the policy: every error.
func check(docs []doc) []error {
	objs, errs := newAPIServer().load(docs)
	if len(errs) > 0 {
		return errs
	}
	return policyErrors(objs)
}

// TestManifests: deploy/ as it is passes the API server's validation and
// the policy.
func TestManifests(t *testing.T) {
	docs, err := readManifests(deployDir, csiDir, secureMetricsDir, chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("read %d documents under %s; want the Namespace, ServiceAccount, DaemonSet, Service and ServiceMonitor", len(docs), deployDir)
	}
	for _, err := range check(docs) {
		t.Error(err)
	}
}

// TestManifestsMutated: each mistake, made in a copy of deploy/'s text,
// is caught, with an error that names it.
func TestManifestsMutated(t *testing.T) {
	docs, err := readManifests(deployDir, csiDir, secureMetricsDir, chartDir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []mutation{
		{"typo in a field name", "readOnlyRootFilesystem: true", "readOnlyRootFilesytem: true", `unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFilesytem"`},
		{"duplicated field", "      enableServiceLinks: false\n", "      enableServiceLinks: false\n      enableServiceLinks: true\n", `key "enableServiceLinks" already set`},
		{"missing selector", "  selector:\n    matchLabels:\n      app.kubernetes.io/name: nodevol\n  updateStrategy:", "  updateStrategy:", "`selector` does not match template `labels`"},
		{"selector not matching the template", "    matchLabels:\n      app.kubernetes.io/name: nodevol\n  updateStrategy:", "    matchLabels:\n      app.kubernetes.io/name: other\n  updateStrategy:", "`selector` does not match template `labels`"},
		{"bidirectional propagation without privilege", "mountPropagation: HostToContainer", "mountPropagation: Bidirectional", "Bidirectional mount propagation is available only to privileged containers"},
		{"a wrong type", "containerPort: 9477", "containerPort: \"9477\"", "containerPort"},
		{"an invalid namespace name", "  name: nodevol-system\n  labels:", "  name: Nodevol_System\n  labels:", "metadata.name: Invalid value"},
		{"another capability", "                - DAC_READ_SEARCH", "                - DAC_READ_SEARCH\n                - SYS_ADMIN", "want drop [ALL], add [DAC_READ_SEARCH] only"},
		{"writable root filesystem", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem false"},
		{"a writable kubelet root", "              readOnly: true\n", "              readOnly: false\n", "want it at --root=/host/var/lib/kubelet, readOnly"},
		{"hostPID", "      enableServiceLinks: false\n", "      enableServiceLinks: false\n      hostPID: true\n", "hostPID true"},
		{"a flag serve does not have", "- --interval=10s", "- --intervall=10s", "unknown flag --intervall"},
		{"a bad flag value", "- --interval=10s", "- --interval=10", "--interval"},
		{"probe on the wrong path", "path: /readyz", "path: /ready", "readiness probe"},
		{"a CPU limit", "            limits:\n              memory: 128Mi", "            limits:\n              cpu: 100m\n              memory: 128Mi", "no CPU limit"},
		{"no toleration", "      tolerations:\n        - operator: Exists\n", "", "no toleration"},
		{"ServiceMonitor typo", "scrapeTimeout: 10s\n      relabelings:\n        # The node the agent", "scrapeTimout: 10s\n      relabelings:\n        # The node the agent", `unknown field "scrapeTimout"`},
		{"ServiceMonitor bad interval", "insecureSkipVerify: true\n      path: /metrics\n      interval: 30s", "insecureSkipVerify: true\n      path: /metrics\n      interval: 30 seconds", "not a Prometheus duration"},
		{"PodMonitor typo", "      relabelings:\n        # The node the driver", "      relabellings:\n        # The node the driver", `unknown field "relabellings"`},
		{"a second hostPath volume", "      volumes:\n", "      volumes:\n        - name: host\n          hostPath:\n            path: /\n", "want only the kubelet root's"},
		{"a command replacing the entrypoint", "          args:\n", "          command: [/bin/sh]\n          args:\n", "want the image's entrypoint"},
		{"image tag latest", "image: ghcr.io/nodevol/nodevol:v0.0.0-dev", "image: ghcr.io/nodevol/nodevol:latest", "not latest or none"},
		{"image without a tag", "image: ghcr.io/nodevol/nodevol:v0.0.0-dev", "image: ghcr.io/nodevol/nodevol", "not latest or none"},
		{"nodevol-csi's image", "image: ghcr.io/nodevol/nodevol:v0.0.0-dev", "image: ghcr.io/nodevol/nodevol-csi:v0.0.0-dev", "want an image of repository .../nodevol "},
		{"AppArmor unconfined", "            privileged: false\n", "            privileged: false\n            appArmorProfile:\n              type: Unconfined\n", `forbids forbidden AppArmor profile`},
		{"a host port", "              containerPort: 9477\n", "              containerPort: 9477\n              hostPort: 9477\n", `forbids hostPort`},
		{"a namespace enforcing baseline", "pod-security.kubernetes.io/enforce: privileged", "pod-security.kubernetes.io/enforce: baseline", `enforces Pod Security "baseline", which refuses the pods`},
		{"secure metrics without the token", "      # For the reviews of the scrapers' tokens (secure metrics).\n      automountServiceAccountToken: true", "      automountServiceAccountToken: false", "automountServiceAccountToken false; want true"},
		{"a token without secure metrics", "            - --secure-metrics-listen=:9478\n", "", "automountServiceAccountToken is not false: without --secure-metrics-listen"},
		{"secure metrics without their port", "            - name: secure-metrics\n              containerPort: 9478\n", "            - name: secure-metrics\n              containerPort: 9479\n", "want one named secure-metrics on --secure-metrics-listen's port 9478"},
		{"ServiceMonitor scraping plain HTTP", "      scheme: https\n", "", "want https, Prometheus's token"},
		{"ServiceMonitor on the plain port", "    - port: secure-metrics\n", "    - port: metrics\n", "want secure-metrics, /metrics"},
		{"Service selecting nothing of ours", "  selector:\n    app.kubernetes.io/name: nodevol\n", "  selector:\n    app.kubernetes.io/name: nodevo\n", "does not select the pods"},
	}
	runMutations(t, "deploy/", docs, check, tests)
}

// mutation is one mistake made in a copy of the manifests' text: old
// replaced by new, once, in the one document holding old; want is in one
// of the errors that catch it.
type mutation struct {
	name     string
	old, new string
	want     string
}

// runMutations checks each mutation of docs with check: it must be
// caught, by an error naming it.
func runMutations(t *testing.T, where string, docs []doc, check func([]doc) []error, tests []mutation) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mutated := slices.Clone(docs)
			found := 0
			for i, d := range mutated {
				if n := strings.Count(string(d.data), tt.old); n > 0 {
					found += n
					mutated[i].data = []byte(strings.Replace(string(d.data), tt.old, tt.new, 1))
				}
			}
			if found != 1 {
				t.Fatalf("%q occurs %d times in %s; the mutation needs it exactly once", tt.old, found, where)
			}
			errs := check(mutated)
			if len(errs) == 0 {
				t.Fatalf("check() of %s with %q replaced by %q found nothing wrong", where, tt.old, tt.new)
			}
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("check() = %v; want an error containing %q", errs, tt.want)
			}
		})
	}
}
