package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Kubernetes's own e2e tests for the volumes nodevol serves, run by
// upstream's e2e.test against a whole cluster whose one node runs the
// kubelet under test: the stock kubelet, then the nodevol kubelet, the
// same selection against each.

// conformanceInputs are the suite's binaries and settings, handed to the
// namespace's PID 1.
type conformanceInputs struct {
	E2ETest string `json:"e2eTest"`
	// Ginkgo is the ginkgo CLI, which runs e2e.test in Procs parallel
	// processes; empty when Procs is 1 (e2e.test runs alone).
	Ginkgo string `json:"ginkgo,omitempty"`
	Procs  int    `json:"procs"`
	// Kubelets are the flavors to run the suite against, in order.
	Kubelets []string `json:"kubelets"`
}

// conformanceFiles are the spec files whose every spec is selected but
// the [Slow], [Feature:…] and [FeatureGate:…] ones (the EmptyDir volume
// mode specs excepted), relative to k8s.io/kubernetes.
var conformanceFiles = []string{
	"test/e2e/common/storage/empty_dir.go",
	"test/e2e/common/storage/secrets_volume.go",
	"test/e2e/common/storage/configmap_volume.go",
	"test/e2e/common/storage/projected_combined.go",
	"test/e2e/common/storage/projected_configmap.go",
	"test/e2e/common/storage/projected_downwardapi.go",
	"test/e2e/common/storage/projected_secret.go",
	"test/e2e/common/storage/downwardapi_volume.go",
}

// conformanceOnlyFiles are the spec files whose [Conformance] specs are
// selected.
var conformanceOnlyFiles = []string{
	"test/e2e/storage/empty_dir_wrapper.go",
	"test/e2e/storage/subpath.go",
}

// selectedFeature is the one feature whose specs are selected, with its
// gate on in the cluster (clusterFeatureGates).
const selectedFeature = "EmptyDirVolumeMode"

// suiteSpec is one spec of a ginkgo JSON report, as far as it is read
// here.
type suiteSpec struct {
	Text   string   `json:"text"` // the containers' and the leaf's texts, joined by spaces
	File   string   `json:"file"` // the leaf's file, as the binary records it
	Line   int      `json:"line"`
	Labels []string `json:"labels"` // every container's and the leaf's
	// State is ginkgo's: passed, failed, skipped, pending, panicked,
	// interrupted, aborted, timedout.
	State   string  `json:"state"`
	Seconds float64 `json:"seconds"`
	Message string  `json:"message,omitempty"` // the failure's or the skip's
}

// ginkgoReport is the part of ginkgo's JSON report (types.Report, one per
// suite) that is read here.
type ginkgoReport struct {
	SuiteDescription string
	SuiteSucceeded   bool
	RunTime          time.Duration
	SpecReports      []struct {
		ContainerHierarchyTexts  []string
		ContainerHierarchyLabels [][]string
		LeafNodeType             string
		LeafNodeLocation         struct {
			FileName   string
			LineNumber int
		}
		LeafNodeText   string
		LeafNodeLabels []string
		State          string
		RunTime        time.Duration
		Failure        struct {
			Message string
		}
	}
}

// readGinkgoReport reads a JSON report's specs (its It nodes; not the
// suite's setup nodes) and the suite's description.
func readGinkgoReport(path string) (description string, specs []suiteSpec, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	var reports []ginkgoReport
	if err := json.Unmarshal(b, &reports); err != nil {
		return "", nil, fmt.Errorf("ginkgo report %s: %w", path, err)
	}
	if len(reports) != 1 {
		return "", nil, fmt.Errorf("ginkgo report %s: %d suites, want 1", path, len(reports))
	}
	r := reports[0]
	for _, s := range r.SpecReports {
		if s.LeafNodeType != "It" {
			continue
		}
		var labels []string
		for _, l := range s.ContainerHierarchyLabels {
			labels = append(labels, l...)
		}
		labels = append(labels, s.LeafNodeLabels...)
		specs = append(specs, suiteSpec{
			Text:    strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " "),
			File:    s.LeafNodeLocation.FileName,
			Line:    s.LeafNodeLocation.LineNumber,
			Labels:  labels,
			State:   s.State,
			Seconds: s.RunTime.Seconds(),
			Message: strings.TrimSpace(s.Failure.Message),
		})
	}
	return r.SuiteDescription, specs, nil
}

// inFiles says whether file (as the binary records it: a module path with
// its version, or a path in a checkout) is one of the files, each given
// relative to k8s.io/kubernetes.
func inFiles(file string, files []string) bool {
	return slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(file, "/"+f) })
}

// selectSpecs is the selection from every spec the suite has: every spec
// of conformanceFiles that is not [Slow], [Feature:…] or [FeatureGate:…]
// (selectedFeature's are), and the [Conformance] specs of
// conformanceOnlyFiles. It keeps the input's order.
func selectSpecs(all []suiteSpec) []suiteSpec {
	var out []suiteSpec
	for _, s := range all {
		switch {
		case inFiles(s.File, conformanceFiles):
			if slices.Contains(s.Labels, "Slow") || !onlySelectedFeature(s.Labels) {
				continue
			}
		case inFiles(s.File, conformanceOnlyFiles):
			if !slices.Contains(s.Labels, "Conformance") {
				continue
			}
		default:
			continue
		}
		out = append(out, s)
	}
	return out
}

// offByDefault is the feature label the framework adds to the specs of a
// gate that is off by default (WithFeatureGate of an alpha gate): it says
// nothing of its own, and is accepted beside selectedFeature.
const offByDefault = "OffByDefault"

// onlySelectedFeature says whether every Feature: and FeatureGate: label
// names selectedFeature, or is Feature:OffByDefault beside it (true with
// none).
func onlySelectedFeature(labels []string) bool {
	selected := slices.Contains(labels, "Feature:"+selectedFeature)
	for _, l := range labels {
		for _, p := range []string{"Feature:", "FeatureGate:"} {
			name, ok := strings.CutPrefix(l, p)
			if ok && name != selectedFeature && !(selected && p == "Feature:" && name == offByDefault) {
				return false
			}
		}
	}
	return true
}

// focusRegexp matches exactly the specs' texts, as ginkgo matches --focus:
// against the suite's description, a space and the spec's text.
func focusRegexp(description string, specs []suiteSpec) string {
	alts := make([]string, len(specs))
	for i, s := range specs {
		alts[i] = regexp.QuoteMeta(s.Text)
	}
	return "^" + regexp.QuoteMeta(description+" ") + "(" + strings.Join(alts, "|") + ")$"
}

// conformanceRun is the suite's run against one kubelet.
type conformanceRun struct {
	Kubelet string      `json:"kubelet"`
	Version string      `json:"version"`
	Specs   []suiteSpec `json:"specs"`
	// Seconds is the suite's own run time; NamespacesGoneSeconds how long
	// after it the last e2e namespace was gone.
	Seconds               float64 `json:"seconds"`
	NamespacesGoneSeconds float64 `json:"namespacesGoneSeconds"`
	ReportDir             string  `json:"reportDir"` // junit_01.xml, ginkgo/report.json, e2e.log
	Command               string  `json:"command"`
	// Error is what kept the run from a result (the suite's own failures
	// are in Specs).
	Error string `json:"error,omitempty"`
}

// conformanceResult is the whole conformance run, handed back by the
// namespace's PID 1.
type conformanceResult struct {
	Description string           `json:"description"`
	Selected    []suiteSpec      `json:"selected"` // from the dry run
	Runs        []conformanceRun `json:"runs"`
	Versions    map[string]string
}

// e2eBaseArgs are the flags e2e.test gets in every run: the admin's
// kubeconfig, reports (junit_01.xml and ginkgo/report.json) in reportDir.
func e2eBaseArgs(kubeconfig, reportDir string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--report-dir=" + reportDir,
		"--report-complete-ginkgo",
		"--ginkgo.no-color",
		"--ginkgo.timeout=2h",
	}
}

// dryRun lists the suite's specs in the selected files with e2e.test
// --ginkgo.dry-run, and selects from them.
func dryRun(ctx context.Context, in *conformanceInputs, kubeconfig, dir string, log *logger) (string, []suiteSpec, error) {
	args := append(e2eBaseArgs(kubeconfig, dir), "--ginkgo.dry-run")
	for _, f := range append(slices.Clone(conformanceFiles), conformanceOnlyFiles...) {
		args = append(args, "--ginkgo.focus-file="+regexp.QuoteMeta(f))
	}
	if err := runLogged(ctx, filepath.Join(dir, "e2e.log"), in.E2ETest, args...); err != nil {
		return "", nil, fmt.Errorf("e2e.test --ginkgo.dry-run: %w", err)
	}
	desc, all, err := readGinkgoReport(filepath.Join(dir, "ginkgo", "report.json"))
	if err != nil {
		return "", nil, err
	}
	sel := selectSpecs(all)
	log.Printf("e2e.test --ginkgo.dry-run: %d specs in the suite, %d selected", len(all), len(sel))
	if len(sel) == 0 {
		return "", nil, errors.New("the dry run selected no spec")
	}
	return desc, sel, nil
}

// runLogged runs bin with args, its output into logPath, with the run's
// PATH and HOME in the log's directory.
func runLogged(ctx context.Context, logPath, bin string, args ...string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{runtimePath, "HOME=" + filepath.Dir(logPath)}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w (log %s)", err, logPath)
	}
	return nil
}

// runSuite runs the selected specs against the cluster, with the ginkgo
// CLI in parallel processes when asked, and reads the results. A failing
// spec makes e2e.test exit 1: that is a result, not an error.
func runSuite(ctx context.Context, in *conformanceInputs, kubeconfig, dir, description string, selected []suiteSpec) ([]suiteSpec, string, error) {
	focus := focusRegexp(description, selected)
	bin, args := in.E2ETest, append(e2eBaseArgs(kubeconfig, dir), "--ginkgo.focus="+focus)
	shown := in.E2ETest + " " + strings.Join(e2eBaseArgs(kubeconfig, dir), " ") + " --ginkgo.focus=<the selected specs' texts>"
	if in.Procs > 1 {
		bin = in.Ginkgo
		args = append([]string{fmt.Sprintf("--procs=%d", in.Procs), "--no-color", "--timeout=2h", "--focus=" + focus, in.E2ETest, "--"}, e2eBaseArgs(kubeconfig, dir)...)
		shown = fmt.Sprintf("%s --procs=%d --no-color --timeout=2h --focus=<the selected specs' texts> %s -- %s", in.Ginkgo, in.Procs, in.E2ETest, strings.Join(e2eBaseArgs(kubeconfig, dir), " "))
	}
	runErr := runLogged(ctx, filepath.Join(dir, "e2e.log"), bin, args...)
	_, specs, err := readGinkgoReport(filepath.Join(dir, "ginkgo", "report.json"))
	if err != nil {
		return nil, shown, errors.Join(runErr, err)
	}
	var ran []suiteSpec
	for _, s := range specs {
		if slices.ContainsFunc(selected, func(x suiteSpec) bool { return x.Text == s.Text }) {
			ran = append(ran, s)
		}
	}
	if len(ran) != len(selected) {
		return ran, shown, fmt.Errorf("the suite reported %d of the %d selected specs (log %s)", len(ran), len(selected), filepath.Join(dir, "e2e.log"))
	}
	var exit *exec.ExitError
	if runErr != nil && !(errors.As(runErr, &exit) && exit.ExitCode() == 1) {
		return ran, shown, runErr
	}
	return ran, shown, nil
}

// systemNamespaces are the namespaces that are not the suite's.
var systemNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// waitNamespacesGone waits until only the system namespaces are left: the
// namespace controller has deleted every pod of the suite's namespaces,
// so the kubelet under test has torn down every volume.
func waitNamespacesGone(ctx context.Context, cp *controlPlane, limit time.Duration) error {
	var left []string
	err := poll(ctx, limit, func() (bool, error) {
		var list corev1.NamespaceList
		if err := cp.get(ctx, "/api/v1/namespaces", &list); err != nil {
			return false, nil
		}
		left = left[:0]
		for _, ns := range list.Items {
			if !slices.Contains(systemNamespaces, ns.Name) {
				left = append(left, ns.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("e2e namespaces still there: %v: %w", left, err)
	}
	return nil
}

// runConformance is the namespace's PID 1 in the conformance mode: the
// whole cluster's control plane, the dry run, then for each kubelet in
// turn a node, the suite, the wait for its namespaces, and the check that
// the node has no pod directory or mount left.
func runConformance(ctx context.Context, cfg innerConfig, log *logger) (*conformanceResult, error) {
	in := cfg.Conformance
	cp, err := startClusterControlPlane(ctx, cfg.Workdir, cfg.Apiserver, cfg.Cluster, log)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	kubeconfig, err := cp.adminKubeconfig()
	if err != nil {
		return nil, err
	}
	dry := filepath.Join(cfg.Workdir, "conformance", "dry-run")
	if err := os.MkdirAll(dry, 0o755); err != nil {
		return nil, err
	}
	desc, selected, err := dryRun(ctx, in, kubeconfig, dry, log)
	if err != nil {
		return nil, err
	}
	res := &conformanceResult{Description: desc, Selected: selected, Versions: cfg.Versions}
	for _, name := range in.Kubelets {
		f := parseFlavor(name)
		run, err := conformanceTurn(ctx, cfg, cp, kubeconfig, f, desc, selected, log.with(name+": "))
		res.Runs = append(res.Runs, run)
		if err != nil {
			return res, fmt.Errorf("%s kubelet: %w", name, err)
		}
	}
	return res, nil
}

// conformanceTurn runs the suite against one kubelet on node 1.
func conformanceTurn(ctx context.Context, cfg innerConfig, cp *controlPlane, kubeconfig string, f flavor, desc string, selected []suiteSpec, log *logger) (run conformanceRun, err error) {
	run = conformanceRun{Kubelet: f.String(), Version: cfg.Versions[f.String()]}
	defer func() {
		if err != nil {
			run.Error = err.Error()
		}
	}()
	dir := filepath.Join(cfg.Workdir, f.String())
	node, err := startClusterNode(ctx, cp, nodeSpec{
		index: 1, flavor: f, kubeletBin: cfg.Kubelets[f.String()], dir: filepath.Join(dir, "node-1"),
		images: cfg.Images, cgroupRoot: "/" + cfg.CgroupName + "/" + f.String() + "/node-1",
	}, log)
	if err != nil {
		return run, err
	}
	defer func() {
		node.stop()
		if err := killAllBut(cp.pids(), 10*time.Second); err != nil {
			log.Printf("note: %v", err)
		}
		if derr := cp.do(context.Background(), "DELETE", "/api/v1/nodes/"+node.name, nil, nil); derr != nil && err == nil {
			err = fmt.Errorf("deleting node %s: %w", node.name, derr)
		}
	}()
	run.ReportDir = filepath.Join(dir, "conformance")
	if err := os.MkdirAll(run.ReportDir, 0o755); err != nil {
		return run, err
	}
	t0 := time.Now()
	log.Printf("e2e.test: %d specs, %d process(es)", len(selected), max(cfg.Conformance.Procs, 1))
	specs, shown, err := runSuite(ctx, cfg.Conformance, kubeconfig, run.ReportDir, desc, selected)
	run.Specs, run.Command, run.Seconds = specs, shown, time.Since(t0).Seconds()
	if err != nil {
		return run, err
	}
	passed := 0
	for _, s := range specs {
		if s.State == "passed" {
			passed++
		}
	}
	log.Printf("e2e.test done in %.0fs: %d of %d passed", run.Seconds, passed, len(specs))
	t1 := time.Now()
	if err := waitNamespacesGone(ctx, cp, 10*time.Minute); err != nil {
		return run, err
	}
	run.NamespacesGoneSeconds = time.Since(t1).Seconds()
	log.Printf("every e2e namespace gone %.1fs after the suite", run.NamespacesGoneSeconds)
	// The namespace controller deleted the pods; the kubelet tears their
	// volumes down a moment after the API forgets them.
	err = poll(ctx, 2*time.Minute, func() (bool, error) { return node.checkNodeClean() == nil, nil })
	if err != nil {
		return run, errors.Join(node.checkNodeClean(), err)
	}
	return run, nil
}

// parseFlavor is the flavor named name ("stock", "nodevol").
func parseFlavor(name string) flavor {
	for _, f := range flavors {
		if f.String() == name {
			return f
		}
	}
	return flavor(-1)
}
