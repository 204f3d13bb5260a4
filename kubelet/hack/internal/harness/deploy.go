package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/nodevol/nodevol/internal/tools/ociimage"
	"github.com/nodevol/nodevol/kubelet/helmchart"
)

// The Helm chart as an operator installs it, on the two-node cluster: the
// chart (deploy/helm/nodevol) rendered by Helm's engine with
// deployChartValues, every object of the agent's and the driver's
// templates created through the API unchanged (as helm install does), the
// DaemonSet controller placing the agent and the CSI driver
// on each node, the exporter's NAS detection and the CSI NAS case against
// those pods, then a rolling update of each DaemonSet to an image of
// another digest while CSI volumes are published, and the agents' secure
// metrics scraped as Prometheus (the subject of the render's
// metrics-reader binding) and as others.

// deployInputs are the deploy scenario's images and manifests, handed to
// the namespace's PID 1.
type deployInputs struct {
	Agent, AgentRollout nodevolImage
	CSI, CSIRollout     nodevolImage
	Manifests           []manifestDoc
}

// manifestDoc is one object of the manifests, as JSON, with where it is
// created.
type manifestDoc struct {
	Src        string          `json:"src"`
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Namespace  string          `json:"namespace,omitempty"`
	Name       string          `json:"name"`
	Object     json.RawMessage `json:"object"`
}

// collectionPath is the API path that creates the object.
func (d manifestDoc) collectionPath() (string, error) {
	ns := "/namespaces/" + d.Namespace
	switch d.APIVersion + " " + d.Kind {
	case "v1 Namespace":
		return "/api/v1/namespaces", nil
	case "v1 ServiceAccount":
		return "/api/v1" + ns + "/serviceaccounts", nil
	case "v1 Service":
		return "/api/v1" + ns + "/services", nil
	case "v1 ConfigMap":
		return "/api/v1" + ns + "/configmaps", nil
	case "apps/v1 DaemonSet":
		return "/apis/apps/v1" + ns + "/daemonsets", nil
	case "storage.k8s.io/v1 CSIDriver":
		return "/apis/storage.k8s.io/v1/csidrivers", nil
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		return "/apis/rbac.authorization.k8s.io/v1/clusterroles", nil
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		return "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", nil
	}
	return "", fmt.Errorf("%s: a %s %s, which the deploy scenario does not know how to create", d.Src, d.APIVersion, d.Kind)
}

// readManifestDocs reads every object of the files, in order (documents
// with only comments skipped), as kubectl apply -f would send them.
func readManifestDocs(files []string) ([]manifestDoc, error) {
	var docs []manifestDoc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		more, err := manifestDocsOf(f, b)
		if err != nil {
			return nil, err
		}
		docs = append(docs, more...)
	}
	return docs, nil
}

// deployChartValues are the values the deploy scenario installs the chart
// with: not the defaults (deploy/ is the default render, which
// kubelet/deploytest checks), so that the ports and the interval are
// shown to reach every place that names them.
var deployChartValues = map[string]any{
	"agent": map[string]any{"interval": "5s"},
	// The driver's secure metrics are off by default (a PodMonitor
	// cannot send Prometheus's token): on here, so that the scenario
	// proves them against the real API server as it does the agent's.
	"csi":     map[string]any{"metrics": map[string]any{"secure": map[string]any{"enabled": true}, "securePort": 19480}},
	"metrics": map[string]any{"agentPort": 19477, "securePort": 19478, "csiPort": 19479},
}

// deployChartTemplates are the chart's templates the scenario creates the
// objects of, in order: the agent, the RBAC of its secure metrics, the
// driver. The ServiceMonitor and PrometheusRule need the Prometheus
// Operator's CRDs, which the cluster does not have.
var deployChartTemplates = []string{"nodevol.yaml", "auth-delegator.yaml", "metrics-reader.yaml", "csi.yaml"}

// renderChartDocs renders the chart in dir with vals, as helm template
// does: the objects of deployChartTemplates, in order.
func renderChartDocs(dir string, vals map[string]any) ([]manifestDoc, error) {
	out, err := helmchart.Render(dir, vals)
	if err != nil {
		return nil, err
	}
	var docs []manifestDoc
	for _, name := range deployChartTemplates {
		text, ok := out[name]
		if !ok {
			return nil, fmt.Errorf("chart %s: template %s renders nothing", dir, name)
		}
		more, err := manifestDocsOf(helmchart.ReleaseName+"/templates/"+name, []byte(text))
		if err != nil {
			return nil, err
		}
		docs = append(docs, more...)
	}
	return docs, nil
}

// manifestDocsOf is every object of a manifest's text, f naming where it
// came from.
func manifestDocsOf(f string, b []byte) ([]manifestDoc, error) {
	var docs []manifestDoc
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", f, n, err)
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(j, &head); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", f, n, err)
		}
		d := manifestDoc{Src: fmt.Sprintf("%s#%d", f, n), APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, Namespace: head.Metadata.Namespace, Object: j}
		if _, err := d.collectionPath(); err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// daemonSetImage is the image of the one DaemonSet named name in docs.
func daemonSetImage(docs []manifestDoc, name string) (string, error) {
	for _, d := range docs {
		if d.Kind != "DaemonSet" || d.Name != name {
			continue
		}
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(d.Object, &ds); err != nil {
			return "", err
		}
		if len(ds.Spec.Template.Spec.Containers) != 1 {
			return "", fmt.Errorf("DaemonSet %s has %d containers, want 1", name, len(ds.Spec.Template.Spec.Containers))
		}
		return ds.Spec.Template.Spec.Containers[0].Image, nil
	}
	return "", fmt.Errorf("no DaemonSet %s in the manifests", name)
}

// rolloutLabel marks the rollout's image: the same files as the image the
// DaemonSet names, another config, so another digest.
const rolloutLabel = "io.github.nodevol.e2e.rollout"

// rolloutImage writes the image of tarPath again, with rolloutLabel in its
// config, tagged "rollout": another manifest digest, the same program,
// which the rolling update moves the DaemonSet to. (By tag: containerd
// 1.6's CRI did not resolve repository@digest to an imported image and
// tried to pull it.)
func rolloutImage(img nodevolImage, out string) (nodevolImage, error) {
	l, err := ociimage.InspectFile(img.Tar)
	if err != nil {
		return nodevolImage{}, err
	}
	var entries []ociimage.Entry
	for _, f := range l.Layer {
		h := f.Header
		e := ociimage.Entry{Path: h.Name, Mode: os.FileMode(h.Mode & 0o777)}
		if h.Mode&0o1000 != 0 {
			e.Mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case '5':
			e.Type = ociimage.Dir
		case '0':
			e.Type, e.Data = ociimage.File, f.Data
		case '2':
			e.Type, e.Target = ociimage.Symlink, h.Linkname
		default:
			return nodevolImage{}, fmt.Errorf("%s: layer entry %s of type %c", img.Tar, h.Name, h.Typeflag)
		}
		entries = append(entries, e)
	}
	cfg := l.Config.Config
	cfg.Labels = map[string]string{}
	for k, v := range l.Config.Config.Labels {
		cfg.Labels[k] = v
	}
	cfg.Labels[rolloutLabel] = "1"
	created, err := time.Parse(time.RFC3339, l.Config.Created)
	if err != nil {
		created = ociimage.Epoch
	}
	repo, _, _ := strings.Cut(img.Name, "@")
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	tag := "rollout"
	desc, err := ociimage.WriteFile(out, &ociimage.Image{
		Name: repo + ":" + tag, Platform: l.Config.Platform, Created: created, Config: cfg,
		Annotations: l.Manifest.Annotations, Entries: entries,
	})
	if err != nil {
		return nodevolImage{}, err
	}
	written, err := ociimage.InspectFile(out)
	if err != nil {
		return nodevolImage{}, err
	}
	return nodevolImage{Tar: out, Name: repo + ":" + tag, Digest: desc.Digest, ConfigDigest: written.Manifest.Config.Digest}, nil
}

// deployNodes is how many nodes the deploy scenario's cluster has.
const deployNodes = 2

// deployNamespace holds the scenario's own pods.
const deployNamespace = "nodevol-e2e"

// runDeploy is the namespace's PID 1 in the deploy mode: a two-node
// cluster of one kubelet flavor, and the scenario's steps, one row each.
func runDeploy(ctx context.Context, cfg innerConfig, log *logger) ([]row, error) {
	f := parseFlavor(cfg.Conformance.Kubelets[0])
	cp, err := startClusterControlPlane(ctx, cfg.Workdir, cfg.Apiserver, cfg.Cluster, log)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	var nodes []*clusterNode
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for i := 1; i <= deployNodes; i++ {
		n, err := startClusterNode(ctx, cp, nodeSpec{
			index: i, flavor: f, kubeletBin: cfg.Kubelets[f.String()],
			dir:    filepath.Join(cfg.Workdir, f.String(), fmt.Sprintf("node-%d", i)),
			images: cfg.Images, cgroupRoot: fmt.Sprintf("/%s/%s/node-%d", cfg.CgroupName, f, i),
		}, log.with(fmt.Sprintf("node %d: ", i)))
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	d := &deployRun{cp: cp, nodes: nodes, in: cfg.Deploy, flavor: f, log: log}
	return d.steps(ctx), nil
}

// deployRun is the deploy scenario's state across its steps.
type deployRun struct {
	cp     *controlPlane
	nodes  []*clusterNode
	in     *deployInputs
	flavor flavor
	log    *logger
	driver string // the CSIDriver's name
	// scraper is a token of the ServiceAccount the chart's
	// metrics-reader binding lets get /metrics; "" until scraperToken
	// makes it (the soak's goroutines ask at once: scraperMu).
	scraperMu sync.Mutex
	scraper   string
}

// deployStep is one row of the scenario.
type deployStep struct {
	name   string
	expect string
	run    func(ctx context.Context, o *outcome)
}

// steps runs the steps in order; after a step that failed, the others
// are not run (they build on it) and say so.
func (d *deployRun) steps(ctx context.Context) []row {
	steps := []deployStep{
		{"apply", "every object of the Helm chart's agent, secure metrics RBAC and driver, rendered with non-default ports and interval, created through the API, unchanged", d.apply},
		{"daemonsets-ready", "the DaemonSet controller runs one agent and one driver per node, each Ready; the driver registered on each node (CSINode)", d.daemonSetsReady},
		{"exporter-nas", "on each node, a tmpfs NAS mounted inside an emptyDir makes that node's agent report nodevol_scan_danger_volumes 1, and 0 once unmounted", d.exporterNAS},
		{"csi-nas", "on each node, the driver refuses to tear down a CSI volume holding a NAS (≥2 tries), the NAS's sentinel intact, its pod's nodevol_csi_unpublish_refused_total (the alert's series) counting each; gone after the unmount", d.csiNAS},
		{"rolling-update", "each DaemonSet rolled (its RollingUpdate strategy) to an image of another digest, to completion on every node; the published CSI volumes intact (files and Memory tmpfs) across it, written and read by their pods every second without a failure, measured by the new driver (NodeGetVolumeStats), and torn down afterwards with no mount or quota project left", d.rollingUpdate},
		{"secure-metrics", "on each node, the agent's and the driver's /metrics on their secure ports (TLS) answer the token of the ServiceAccount the chart's metrics-reader binding lets get /metrics with the metrics, another account's token with 403, none or a made-up one with 401, and count the refusal; their plain ports serve /healthz and /readyz but not /metrics", d.secureMetrics},
	}
	var rows []row
	failed := false
	for i, s := range steps {
		var o outcome
		t0 := time.Now()
		if failed {
			o.failures = append(o.failures, "not run: an earlier step failed")
		} else {
			s.run(ctx, &o)
		}
		o.time("step", time.Since(t0))
		r := row{Scenario: fmt.Sprintf("deploy-%d-%s", i+1, s.name), Kubelet: d.flavor.String(), Expected: s.expect,
			Observed: strings.Join(o.observed, "; "), Details: o.facts, OK: len(o.failures) == 0, Failures: o.failures, Timings: o.timings}
		d.log.Printf("%s: %s: %s", r.Scenario, verdict(r), r.Observed)
		for _, f := range r.Failures {
			d.log.Printf("  ✗ %s", f)
		}
		rows = append(rows, r)
		failed = failed || !r.OK
	}
	return rows
}

// apply creates every object, in the manifests' order.
func (d *deployRun) apply(ctx context.Context, o *outcome) {
	var kinds []string
	for _, m := range d.in.Manifests {
		path, err := m.collectionPath()
		if err == nil {
			err = d.cp.do(ctx, http.MethodPost, path, m.Object, nil)
		}
		if err != nil {
			o.harness(fmt.Errorf("creating %s %s (%s): %w", m.Kind, m.Name, m.Src, err))
			return
		}
		kinds = append(kinds, m.Kind+" "+m.Name)
		if m.Kind == "CSIDriver" {
			d.driver = m.Name
		}
	}
	o.observe("%d objects created", len(kinds))
	o.fact("created: %s", strings.Join(kinds, ", "))
	o.want(d.driver != "", "no CSIDriver in the manifests")
}

// daemonSets are the manifests' DaemonSets, as namespace/name.
func (d *deployRun) daemonSets() []manifestDoc {
	var out []manifestDoc
	for _, m := range d.in.Manifests {
		if m.Kind == "DaemonSet" {
			out = append(out, m)
		}
	}
	return out
}

// dsPods is the DaemonSet's pods by node, and the DaemonSet.
func (d *deployRun) dsPods(ctx context.Context, m manifestDoc) (*appsv1.DaemonSet, map[string]corev1.Pod, error) {
	var ds appsv1.DaemonSet
	if err := d.cp.get(ctx, "/apis/apps/v1/namespaces/"+m.Namespace+"/daemonsets/"+m.Name, &ds); err != nil {
		return nil, nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, nil, err
	}
	var list corev1.PodList
	if err := d.cp.get(ctx, "/api/v1/namespaces/"+m.Namespace+"/pods?labelSelector="+url.QueryEscape(sel.String()), &list); err != nil {
		return nil, nil, err
	}
	byNode := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			if _, dup := byNode[p.Spec.NodeName]; dup {
				return &ds, nil, fmt.Errorf("two pods of %s on node %s", m.Name, p.Spec.NodeName)
			}
			byNode[p.Spec.NodeName] = p
		}
	}
	return &ds, byNode, nil
}

// podReady says whether the pod's Ready condition is true.
func podReady(p corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// rolledOut says whether the DaemonSet is fully rolled out to image: the
// controller saw the last change, every node runs an updated, available
// pod of image, and nothing else.
func (d *deployRun) rolledOut(ctx context.Context, m manifestDoc, image string) (bool, string, error) {
	ds, pods, err := d.dsPods(ctx, m)
	if err != nil {
		return false, "", err
	}
	st := ds.Status
	state := fmt.Sprintf("generation %d observed %d, desired %d, updated %d, ready %d, available %d, pods on %d nodes",
		ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable, len(pods))
	if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled != int32(len(d.nodes)) ||
		st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberAvailable != st.DesiredNumberScheduled || st.NumberReady != st.DesiredNumberScheduled {
		return false, state, nil
	}
	for _, n := range d.nodes {
		p, ok := pods[n.name]
		if !ok || !podReady(p) || p.Spec.Containers[0].Image != image {
			return false, state, nil
		}
	}
	return len(pods) == len(d.nodes), state, nil
}

// csiNodeLists says whether the node's CSINode lists the driver.
func (d *deployRun) csiNodeLists(ctx context.Context, node string) bool {
	var n storagev1.CSINode
	if err := d.cp.get(ctx, "/apis/storage.k8s.io/v1/csinodes/"+node, &n); err != nil {
		return false
	}
	return slices.ContainsFunc(n.Spec.Drivers, func(x storagev1.CSINodeDriver) bool { return x.Name == d.driver })
}

func (d *deployRun) daemonSetsReady(ctx context.Context, o *outcome) {
	t0 := time.Now()
	for _, m := range d.daemonSets() {
		image, err := daemonSetImage(d.in.Manifests, m.Name)
		if err != nil {
			o.harness(err)
			return
		}
		var state string
		err = poll(ctx, 3*time.Minute, func() (bool, error) {
			ok, s, err := d.rolledOut(ctx, m, image)
			state = s
			return ok, err
		})
		if !o.want(err == nil, "DaemonSet %s/%s not ready on every node: %v (%s)", m.Namespace, m.Name, err, state) {
			for _, n := range d.nodes {
				o.fact("%s kubelet errors: %s", n.name, n.kubelet.lastErrors())
			}
			return
		}
		_, pods, _ := d.dsPods(ctx, m)
		var where []string
		for _, n := range d.nodes {
			where = append(where, fmt.Sprintf("%s on %s (%s)", pods[n.name].Name, n.name, pods[n.name].Status.PodIP))
		}
		o.observe("%s: %d/%d Ready", m.Name, len(pods), len(d.nodes))
		o.fact("%s/%s: %s", m.Namespace, m.Name, strings.Join(where, ", "))
	}
	o.time("manifests applied → both DaemonSets Ready on every node", time.Since(t0))
	for _, n := range d.nodes {
		err := poll(ctx, time.Minute, func() (bool, error) { return d.csiNodeLists(ctx, n.name), nil })
		o.want(err == nil, "CSINode %s does not list %s", n.name, d.driver)
	}
	o.observe("driver registered on %d nodes", len(d.nodes))
}

// appPod is a busybox pod on the node with the volumes mounted at their
// names under /v, writing "from-pod" into each, then sleeping.
func appPod(name, node string, vols []corev1.Volume) *corev1.Pod {
	var mounts []corev1.VolumeMount
	var script []string
	for _, v := range vols {
		mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: "/v/" + v.Name})
		script = append(script, "echo "+fromPodText+" > /v/"+v.Name+"/from-pod")
	}
	script = append(script, "exec sleep 100000")
	grace := int64(1)
	noToken := false
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: deployNamespace},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "app", Image: suiteBusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", strings.Join(script, " && ")}, VolumeMounts: mounts,
			}},
			Volumes: vols,
		},
	}
}

// inNode is path (in the node's mount namespace) as the harness reaches
// it: through the holder's root.
func (n *clusterNode) inNode(path string) string {
	return fmt.Sprintf("/proc/%d/root%s", n.holder.Process.Pid, path)
}

// nodeCommand runs a program in the node's mount namespace (mount,
// umount: a mount made there, as the node's own, which the harness's
// namespace does not see).
func (n *clusterNode) nodeCommand(ctx context.Context, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/nsenter", append([]string{"-t", fmt.Sprint(n.holder.Process.Pid), "-m", "--", bin}, args...)...)
	cmd.Env = []string{runtimePath}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("in node %s: %s %s: %w: %s", n.name, bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nodeNAS is a "NAS" mounted in a node's mount namespace at dir (a path
// in the node): a tmpfs, or a bind mount of a host directory, holding
// sentinel files whose sha256 is known.
type nodeNAS struct {
	node    *clusterNode
	dir     string
	kind    nasKind
	source  string // a bind mount's host directory (a path of the run's namespace, seen the same in the node)
	files   []nasFile
	mounted bool
}

// nasFile is one sentinel file of a NAS.
type nasFile struct {
	path string // relative to the NAS
	size int
	sum  [sha256.Size]byte
}

// mountNodeNAS mounts a tmpfs NAS at dir with one 64 KiB sentinel,
// SENTINEL.
func mountNodeNAS(ctx context.Context, n *clusterNode, dir string) (*nodeNAS, error) {
	return mountNodeNASOf(ctx, n, dir, nasTmpfs, "", map[string]int{"SENTINEL": sentinelSize})
}

// mountNodeNASOf mounts a NAS of the kind at dir, holding random files of
// the given paths and sizes. A bind NAS's files are written into source
// (created) before the mount, as a host directory's data; a tmpfs NAS's
// into the fresh mount.
func mountNodeNASOf(ctx context.Context, n *clusterNode, dir string, kind nasKind, source string, files map[string]int) (*nodeNAS, error) {
	nas := &nodeNAS{node: n, dir: dir, kind: kind, source: source}
	if err := os.Mkdir(n.inNode(dir), 0o755); err != nil {
		return nil, err
	}
	write := func(root string) error {
		for _, p := range slices.Sorted(maps.Keys(files)) {
			b := make([]byte, files[p])
			_, _ = rand.Read(b)
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(root, p), b, 0o644); err != nil {
				return err
			}
			nas.files = append(nas.files, nasFile{path: p, size: len(b), sum: sha256.Sum256(b)})
		}
		return nil
	}
	switch kind {
	case nasTmpfs:
		if err := n.nodeCommand(ctx, "/bin/mount", "-t", "tmpfs", "-o", "size=4m", "e2e-nas", dir); err != nil {
			return nil, err
		}
		nas.mounted = true
		return nas, write(n.inNode(dir))
	case nasBind:
		if err := os.MkdirAll(source, 0o755); err != nil {
			return nil, err
		}
		if err := write(source); err != nil {
			return nil, err
		}
		if err := n.nodeCommand(ctx, "/bin/mount", "--bind", source, dir); err != nil {
			return nil, err
		}
		nas.mounted = true
		return nas, nil
	}
	return nil, fmt.Errorf("NAS kind %v", kind)
}

// lost checks every sentinel file through the mount, byte for byte (its
// sha256): the paths missing or changed, and their bytes.
func (nas *nodeNAS) lost() (paths []string, lostBytes int64) {
	return nas.lostUnder(nas.node.inNode(nas.dir))
}

// lostUnder checks the sentinel files under root (the mount, or a bind
// NAS's host directory).
func (nas *nodeNAS) lostUnder(root string) (paths []string, lostBytes int64) {
	for _, f := range nas.files {
		b, err := os.ReadFile(filepath.Join(root, f.path))
		if err != nil || len(b) != f.size || sha256.Sum256(b) != f.sum {
			paths = append(paths, f.path)
			lostBytes += int64(f.size)
		}
	}
	return paths, lostBytes
}

// intact says whether every sentinel is there, byte for byte.
func (nas *nodeNAS) intact() bool {
	lost, _ := nas.lost()
	return len(lost) == 0
}

func (nas *nodeNAS) unmount(ctx context.Context) error {
	if !nas.mounted {
		return nil
	}
	if err := nas.node.nodeCommand(ctx, "/bin/umount", nas.dir); err != nil {
		return err
	}
	nas.mounted = false
	return nil
}

// podVolumeDir is a pod's volume directory in the node.
func podVolumeDir(pod *corev1.Pod, plugin, vol string) string {
	return filepath.Join(kubeletRootInNode, "pods", string(pod.UID), "volumes", plugin, vol)
}

// agentMetrics scrapes the node's agent pod (on the pod network) as
// Prometheus does: componentMetrics.
func (d *deployRun) agentMetrics(ctx context.Context, node string) (metrics, error) {
	return d.componentMetrics(ctx, "nodevol", node)
}

// csiMetrics scrapes the node's nodevol-csi pod as Prometheus does:
// componentMetrics.
func (d *deployRun) csiMetrics(ctx context.Context, node string) (metrics, error) {
	return d.componentMetrics(ctx, "nodevol-csi", node)
}

// componentMetrics scrapes /metrics of the node's pod of the DaemonSet ds
// (on the pod network) as Prometheus does: on its port named
// secure-metrics, over TLS, with a token of the ServiceAccount the
// render's metrics-reader binding names. Both agents serve it in
// deployChartValues' render (deploy-6-secure-metrics checks that they
// do, and that plain HTTP serves no /metrics).
func (d *deployRun) componentMetrics(ctx context.Context, ds, node string) (metrics, error) {
	addr, err := d.podAddr(ctx, ds, "secure-metrics", node)
	if err != nil {
		return nil, err
	}
	token, err := d.scraperToken(ctx)
	if err != nil {
		return nil, err
	}
	return scrapeAs(ctx, secureMetricsClient, "https://"+addr+"/metrics", token)
}

// podAddr is the pod IP and the number of the container's port named
// port of the node's pod of the DaemonSet ds: the chart's values set the
// numbers, the names stay.
func (d *deployRun) podAddr(ctx context.Context, ds, port, node string) (string, error) {
	var m manifestDoc
	for _, x := range d.daemonSets() {
		if x.Name == ds {
			m = x
		}
	}
	_, pods, err := d.dsPods(ctx, m)
	if err != nil {
		return "", err
	}
	p, ok := pods[node]
	if !ok || p.Status.PodIP == "" {
		return "", fmt.Errorf("no %s pod with an IP on %s", ds, node)
	}
	return podPortAddr(p, port)
}

// podPortAddr is p's IP and the number of its first container's port
// named port.
func podPortAddr(p corev1.Pod, port string) (string, error) {
	for _, cp := range p.Spec.Containers[0].Ports {
		if cp.Name == port {
			return net.JoinHostPort(p.Status.PodIP, fmt.Sprint(cp.ContainerPort)), nil
		}
	}
	return "", fmt.Errorf("pod %s has no port named %s", p.Name, port)
}

// secureMetricsClient scrapes the agents' secure metrics. Their
// certificate is self-signed (no --tls-cert-file in deploy/): the
// scraper authenticates itself with its token, not the agent, as a
// ServiceMonitor with insecureSkipVerify does.
var secureMetricsClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
}}

// metricsReader is the ServiceAccount the rendered chart's binding of
// ClusterRole nodevol-metrics-reader names (Prometheus's).
func (d *deployRun) metricsReader() (namespace, name string, err error) {
	for _, m := range d.in.Manifests {
		if m.Kind != "ClusterRoleBinding" {
			continue
		}
		var b struct {
			RoleRef struct {
				Name string `json:"name"`
			} `json:"roleRef"`
			Subjects []struct {
				Kind, Name, Namespace string
			} `json:"subjects"`
		}
		if err := json.Unmarshal(m.Object, &b); err != nil {
			return "", "", fmt.Errorf("%s: %w", m.Src, err)
		}
		for _, s := range b.Subjects {
			if b.RoleRef.Name == "nodevol-metrics-reader" && s.Kind == "ServiceAccount" {
				return s.Namespace, s.Name, nil
			}
		}
	}
	return "", "", errors.New("no ClusterRoleBinding of nodevol-metrics-reader to a ServiceAccount in the manifests")
}

// serviceAccountToken creates the ServiceAccount (and its namespace) if
// need be and returns a token of it from the TokenRequest API.
func (d *deployRun) serviceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	if err := d.cp.ensureNamespace(ctx, namespace); err != nil {
		return "", err
	}
	sa := corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if err := d.cp.do(ctx, http.MethodPost, "/api/v1/namespaces/"+namespace+"/serviceaccounts", &sa, nil); err != nil && !errors.Is(err, ErrExists) {
		return "", err
	}
	req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}}
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	if err := d.cp.do(ctx, http.MethodPost, "/api/v1/namespaces/"+namespace+"/serviceaccounts/"+name+"/token", req, &tr); err != nil {
		return "", fmt.Errorf("a token of %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// scraperToken is a token of metricsReader's ServiceAccount, made once.
func (d *deployRun) scraperToken(ctx context.Context) (string, error) {
	d.scraperMu.Lock()
	defer d.scraperMu.Unlock()
	if d.scraper != "" {
		return d.scraper, nil
	}
	ns, name, err := d.metricsReader()
	if err != nil {
		return "", err
	}
	if d.scraper, err = d.serviceAccountToken(ctx, ns, name); err != nil {
		return "", err
	}
	return d.scraper, nil
}

// securedComponents are the DaemonSets whose /metrics deployChartValues'
// render serves securely: the port names of their secure and plain
// servers, a metric each always exports, and the counter of the
// decisions of their metrics filter.
var securedComponents = []struct{ ds, plainPort, metric, counter string }{
	{"nodevol", "metrics", "nodevol_scan_danger_volumes", "nodevol_metrics_auth_requests_total"},
	{"nodevol-csi", "http", "nodevol_csi_unpublish_refused_total", "nodevol_csi_metrics_auth_requests_total"},
}

// secureMetrics scrapes each node's agent and driver as Prometheus would,
// and as others would.
func (d *deployRun) secureMetrics(ctx context.Context, o *outcome) {
	scraper, err := d.scraperToken(ctx)
	if err != nil {
		o.harness(err)
		return
	}
	ns, _, _ := d.metricsReader()
	other, err := d.serviceAccountToken(ctx, ns, "not-prometheus")
	if err != nil {
		o.harness(err)
		return
	}
	get := func(client *http.Client, url, token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err.Error()
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp.StatusCode, string(b)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	for _, c := range securedComponents {
		var m manifestDoc
		for _, x := range d.daemonSets() {
			if x.Name == c.ds {
				m = x
			}
		}
		_, pods, err := d.dsPods(ctx, m)
		if err != nil {
			o.harness(err)
			return
		}
		for _, n := range d.nodes {
			p, ok := pods[n.name]
			if !o.want(ok && p.Status.PodIP != "", "no %s pod with an IP on %s", c.ds, n.name) {
				return
			}
			secureAddr, err := podPortAddr(p, "secure-metrics")
			if !o.want(err == nil, "%s %s: %v", c.ds, n.name, err) {
				return
			}
			plainAddr, err := podPortAddr(p, c.plainPort)
			if !o.want(err == nil, "%s %s: %v", c.ds, n.name, err) {
				return
			}
			secure := "https://" + secureAddr + "/metrics"
			var codes []string
			for _, tc := range []struct {
				what, token string
				want        int
			}{
				{"Prometheus's token", scraper, http.StatusOK},
				{"another account's token", other, http.StatusForbidden},
				{"no token", "", http.StatusUnauthorized},
				{"a made-up token", "made-up", http.StatusUnauthorized},
			} {
				code, body := get(secureMetricsClient, secure, tc.token)
				o.want(code == tc.want, "%s %s: %s: %d %.200q; want %d", c.ds, n.name, tc.what, code, body, tc.want)
				if code == http.StatusOK {
					o.want(strings.Contains(body, c.metric), "%s %s: %s: 200 without %s", c.ds, n.name, tc.what, c.metric)
				}
				codes = append(codes, fmt.Sprintf("%s %d", tc.what, code))
			}
			// The kubelet's probes stay plain, without a token; the
			// metrics are not there.
			listen := "http://" + plainAddr
			hz, _ := get(plain, listen+"/healthz", "")
			rz, _ := get(plain, listen+"/readyz", "")
			pm, _ := get(plain, listen+"/metrics", "")
			o.want(hz == http.StatusOK && rz == http.StatusOK && pm == http.StatusNotFound, "%s %s: plain /healthz %d, /readyz %d, /metrics %d; want 200, 200, 404", c.ds, n.name, hz, rz, pm)
			_, body := get(secureMetricsClient, secure, scraper)
			o.want(strings.Contains(body, c.counter+`{result="forbidden"} 1`), "%s %s: the refusal is not counted: %q", c.ds, n.name, grepMetric(body, c.counter))
			o.observe("%s on %s: %s; plain /healthz %d, /readyz %d, /metrics %d", c.ds, n.name, strings.Join(codes, ", "), hz, rz, pm)
		}
	}
}

// grepMetric is the lines of body that name metric.
func grepMetric(body, metric string) string {
	var out []string
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, metric) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}

func (d *deployRun) exporterNAS(ctx context.Context, o *outcome) {
	if err := d.cp.ensureNamespace(ctx, deployNamespace); err != nil {
		o.harness(err)
		return
	}
	for _, n := range d.nodes {
		vol := corev1.Volume{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
		app := &apiPodRun{api: d.cp, pod: appPod("exporter-app-"+n.name, n.name, []corev1.Volume{vol})}
		if !app.startRunning(ctx, 90*time.Second, o) {
			return
		}
		nas, err := mountNodeNAS(ctx, n, filepath.Join(podVolumeDir(app.created, "kubernetes.io~empty-dir", scratchVolume), "nas"))
		if err != nil {
			o.harness(err)
			app.stop(ctx, time.Minute)
			return
		}
		danger := func(want float64) (time.Duration, error) {
			t0 := time.Now()
			err := poll(ctx, 30*time.Second, func() (bool, error) {
				m, err := d.agentMetrics(ctx, n.name)
				return err == nil && m.value("nodevol_scan_danger_volumes", nil) == want, nil
			})
			return time.Since(t0), err
		}
		up, err1 := danger(1)
		o.want(err1 == nil, "%s: the agent did not report the NAS (nodevol_scan_danger_volumes 1): %v", n.name, err1)
		err2 := nas.unmount(ctx)
		down, err3 := danger(0)
		o.want(err2 == nil && err3 == nil, "%s: the agent still reports danger after the unmount: %v %v", n.name, err2, err3)
		if err1 == nil && err3 == nil {
			o.observe("%s: danger 1 after %.2fs, 0 after %.2fs", n.name, up.Seconds(), down.Seconds())
		}
		if !o.want(app.stop(ctx, 90*time.Second), "%s: the app pod did not go", n.name) {
			return
		}
	}
}

func (d *deployRun) csiVolume(name, medium, size string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: d.driver, VolumeAttributes: map[string]string{"medium": medium, "sizeLimit": size}}}}
}

func (d *deployRun) csiNAS(ctx context.Context, o *outcome) {
	for _, n := range d.nodes {
		app := &apiPodRun{api: d.cp, pod: appPod("csi-app-"+n.name, n.name, []corev1.Volume{d.csiVolume(scratchVolume, "Default", "64Mi")})}
		if !app.startRunning(ctx, 90*time.Second, o) {
			o.fact("%s kubelet errors: %s", n.name, n.kubelet.lastErrors())
			return
		}
		mountDir := filepath.Join(podVolumeDir(app.created, "kubernetes.io~csi", scratchVolume), "mount")
		nas, err := mountNodeNAS(ctx, n, filepath.Join(mountDir, "nas"))
		if err != nil {
			o.harness(err)
			app.stop(ctx, time.Minute)
			return
		}
		// The driver's refusal counter, which the NodevolCSIUnpublishRefused
		// alert watches, as Prometheus scrapes it: from the pod.
		refusedBefore, err := d.csiMetrics(ctx, n.name)
		if err != nil {
			o.harness(err)
			return
		}
		offset, err := n.kubelet.logSize()
		if err == nil {
			err = d.cp.deletePod(ctx, app.created)
		}
		if err != nil {
			o.harness(err)
			return
		}
		attempts := teardownAttempts{re: csiTeardownLine(string(app.created.UID), scratchVolume)}
		err = poll(ctx, 90*time.Second, func() (bool, error) {
			return attempts.failures() >= 2, attempts.read(n.kubelet, offset)
		})
		o.want(err == nil, "%s: want ≥2 failed TearDowns of the CSI volume, saw %d: %v", n.name, attempts.failures(), err)
		o.want(nas.intact(), "%s: the NAS's sentinel is not intact while the teardown is refused", n.name)
		o.want(attempts.everyFailureRefuses(nas.dir), "%s: not every TearDown failure is the refusal naming the NAS", n.name)
		refusedAfter, err := d.csiMetrics(ctx, n.name)
		if err != nil {
			o.harness(err)
			return
		}
		refused := refusedAfter.value("nodevol_csi_unpublish_refused_total", nil) - refusedBefore.value("nodevol_csi_unpublish_refused_total", nil)
		o.want(refused >= float64(attempts.failures()), "%s: the driver's nodevol_csi_unpublish_refused_total grew by %g; the kubelet's log shows %d refused tries", n.name, refused, attempts.failures())
		o.fact("%s: nodevol_csi_unpublish_refused_total +%g, scraped from the driver's pod", n.name, refused)
		if err := nas.unmount(ctx); err != nil {
			o.harness(err)
			return
		}
		gone := poll(ctx, 90*time.Second, func() (bool, error) {
			_, err := d.cp.apiPod(ctx, app.created.Namespace, app.created.Name)
			_, serr := os.Stat(n.inNode(filepath.Join(kubeletRootInNode, "pods", string(app.created.UID))))
			return errors.Is(err, ErrNotFound) && os.IsNotExist(serr), nil
		})
		if o.want(gone == nil, "%s: the pod or its directory did not go after the NAS's unmount: %v", n.name, gone) {
			app.created = nil
			o.observe("%s: %d refused tries, sentinel intact, gone after umount", n.name, attempts.failures())
		}
	}
}

func (d *deployRun) rollingUpdate(ctx context.Context, o *outcome) {
	// A pod with a Default and a Memory volume of the driver's on each
	// node, published while the DaemonSets roll, writing into both
	// throughout (csirollout.go).
	var apps []rolloutApp
	defer func() {
		for _, a := range apps {
			a.run.stop(context.Background(), time.Minute)
		}
	}()
	for _, n := range d.nodes {
		run := &apiPodRun{api: d.cp, pod: d.csiWriterPod("rollout-app-"+n.name, n.name)}
		if !run.startRunning(ctx, 90*time.Second, o) {
			return
		}
		apps = append(apps, rolloutApp{n, run})
	}
	check := func(when string) bool {
		ok := true
		for _, a := range apps {
			for _, vol := range []string{"data", "mem"} {
				dir := filepath.Join(podVolumeDir(a.run.created, "kubernetes.io~csi", vol), "mount")
				err := poll(ctx, 10*time.Second, func() (bool, error) {
					b, err := os.ReadFile(a.node.inNode(dir + "/from-pod"))
					return err == nil && string(b) == fromPodText+"\n", nil
				})
				ok = o.want(err == nil, "%s %s: the pod's file in volume %s is not there: %v", when, a.node.name, vol, err) && ok
			}
			mounts, err := a.node.mountsUnder(filepath.Join(podVolumeDir(a.run.created, "kubernetes.io~csi", "mem"), "mount"))
			ok = o.want(err == nil && len(mounts) == 0, "%s %s: mounts below the Memory volume: %v %v", when, a.node.name, mounts, err) && ok
			all, err := a.node.mountsUnder(filepath.Join(kubeletRootInNode, "pods", string(a.run.created.UID)))
			memMount := filepath.Join(podVolumeDir(a.run.created, "kubernetes.io~csi", "mem"), "mount")
			ok = o.want(err == nil && slices.Contains(all, memMount), "%s %s: the Memory volume's tmpfs is not mounted at %s: %v %v", when, a.node.name, memMount, all, err) && ok
			ok = a.writing(ctx, when, o) && ok
			for _, v := range rolloutVolumes {
				o.fact("%s %s: volume %s's record: %s", when, a.node.name, v.name, a.describeRecord(v.name))
			}
		}
		return ok
	}
	if !check("before the update") {
		return
	}
	for _, m := range d.daemonSets() {
		img := d.in.AgentRollout
		if m.Name != "nodevol" {
			img = d.in.CSIRollout
		}
		ref := img.Name
		var ds appsv1.DaemonSet
		if err := d.cp.get(ctx, "/apis/apps/v1/namespaces/"+m.Namespace+"/daemonsets/"+m.Name, &ds); err != nil {
			o.harness(err)
			return
		}
		ds.Spec.Template.Spec.Containers[0].Image = ref
		t0 := time.Now()
		if err := d.cp.do(ctx, http.MethodPut, "/apis/apps/v1/namespaces/"+m.Namespace+"/daemonsets/"+m.Name, &ds, nil); err != nil {
			o.harness(err)
			return
		}
		var state string
		err := poll(ctx, 5*time.Minute, func() (bool, error) {
			ok, s, err := d.rolledOut(ctx, m, ref)
			state = s
			return ok, err
		})
		if !o.want(err == nil, "DaemonSet %s did not roll out to %s: %v (%s)", m.Name, ref, err, state) {
			return
		}
		_, pods, _ := d.dsPods(ctx, m)
		for _, p := range pods {
			if len(p.Status.ContainerStatuses) == 1 {
				// An imported image has no repository digest: containerd's
				// CRI reports its config's digest as the image ID.
				id := p.Status.ContainerStatuses[0].ImageID
				o.want(strings.HasSuffix(id, img.Digest) || strings.HasSuffix(id, img.ConfigDigest), "%s: runs image %s, want the rollout image (manifest %s, config %s)", p.Name, id, img.Digest, img.ConfigDigest)
			}
		}
		o.observe("%s rolled to %s in %.1fs", m.Name, img.Digest[:19], time.Since(t0).Seconds())
		o.time(m.Name+": image changed → rolled out on every node", time.Since(t0))
	}
	for _, n := range d.nodes {
		err := poll(ctx, time.Minute, func() (bool, error) { return d.csiNodeLists(ctx, n.name), nil })
		o.want(err == nil, "CSINode %s does not list %s after the update", n.name, d.driver)
	}
	if !check("after the update") {
		return
	}
	for _, a := range apps {
		if !d.measuredByNewDriver(ctx, a, o) {
			return
		}
	}
	o.observe("published volumes intact, written by their pods throughout, measured by the new driver")
	for _, a := range apps {
		uid := string(a.run.created.UID)
		if !o.want(a.run.stop(ctx, 90*time.Second), "%s: the app pod did not go after the update", a.node.name) {
			return
		}
		err := poll(ctx, 60*time.Second, func() (bool, error) {
			_, serr := os.Stat(a.node.inNode(filepath.Join(kubeletRootInNode, "pods", uid)))
			return os.IsNotExist(serr), nil
		})
		o.want(err == nil, "%s: the pod directory stayed after the pod went: %v", a.node.name, err)
		left := d.leftBehind(a, uid)
		o.want(len(left) == 0, "%s: left after the pod went: %s", a.node.name, strings.Join(left, ", "))
	}
	apps = nil
	o.observe("torn down afterwards, nothing left")
}

// prepareDeploy renders the chart and reads the two images the DaemonSets
// name (built with the root module's hack/image unless given), and, with
// rollout, writes each image again with another digest for the rolling
// update.
func prepareDeploy(ctx context.Context, opts options, dir string, rollout bool, log *logger) (*deployInputs, error) {
	docs, err := renderChartDocs(opts.chart, deployChartValues)
	if err != nil {
		return nil, err
	}
	in := &deployInputs{Manifests: docs}
	for _, x := range []struct {
		ds, binary, given string
		// rolledTo is the image the update moves to, when another
		// build's (given: the image itself, rewritten).
		rolledTo     string
		img, rollout *nodevolImage
	}{
		{"nodevol", "nodevol", opts.nodevolImage, "", &in.Agent, &in.AgentRollout},
		{"nodevol-csi", "nodevol-csi", opts.csiImage, opts.csiRolloutImage, &in.CSI, &in.CSIRollout},
	} {
		ref, err := daemonSetImage(docs, x.ds)
		if err != nil {
			return nil, err
		}
		if *x.img, err = imageOf(ctx, x.given, dir, x.binary, ref, log); err != nil {
			return nil, err
		}
		if x.img.Name != ref {
			return nil, fmt.Errorf("the image %s is named %s; DaemonSet %s runs %s", x.img.Tar, x.img.Name, x.ds, ref)
		}
		if !rollout {
			log.Printf("deploy: %s image %s (%s)", x.ds, x.img.Name, x.img.Digest)
			continue
		}
		next := *x.img
		if x.rolledTo != "" {
			if next, err = readNodevolImage(x.rolledTo); err != nil {
				return nil, err
			}
			if next.Name != ref {
				return nil, fmt.Errorf("the image %s is named %s; DaemonSet %s runs %s", next.Tar, next.Name, x.ds, ref)
			}
		}
		if *x.rollout, err = rolloutImage(next, filepath.Join(dir, x.binary+"-rollout.tar")); err != nil {
			return nil, err
		}
		log.Printf("deploy: %s image %s (%s); rollout image %s (%s)", x.ds, x.img.Name, x.img.Digest, x.rollout.Name, x.rollout.Digest)
	}
	return in, nil
}
