package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// scenarios are the cases of the table in docs/e2e.md, in its order.
func scenarios() []scenario {
	return []scenario{
		{num: 1, name: "nas-tmpfs", expect: expectNAS, run: nasScenario(nasTmpfs, noRestart)},
		{num: 2, name: "nas-bind", expect: expectNAS, run: nasScenario(nasBind, noRestart)},
		{num: 3, name: "memory-sizelimit", expect: expectMemory, run: memoryScenario},
		{num: 4, name: "downward-projected", expect: expectWrapped, run: wrappedScenario},
		{num: 5, name: "restart-nas", sched: alone, expect: expectNAS, run: nasScenario(nasTmpfs, restartAcrossDeletion)},
		{num: 6, name: "subpath", expect: expectSubPath, run: subPathScenario},
		{num: 7, name: exporterScenarioName, sched: alone, expect: expectExporter, run: exporterScenario},
		{num: 8, name: exporterControlName, sched: alone, kubelets: []flavor{nodevolKubelet}, expect: expectExporterControl, run: exporterControlScenario},
		// nodevol-csi serves stock kubelets: the nodevol kubelet's row would
		// add nothing.
		{num: 9, name: csiScenarioName, sched: alone, kubelets: []flavor{stockKubelet}, nodevolOnStock: true, expect: expectCSI, run: csiScenario},
		// An operator replaces the kubelet binary and restarts the service,
		// without draining: each way once, on a node of its own.
		{num: 10, name: "switch-to-nodevol", sched: alone, switches: &kubeletSwitch{stockKubelet, nodevolKubelet}, expect: expectSwitch(nodevolKubelet), run: switchScenario(kubeletSwitch{stockKubelet, nodevolKubelet})},
		{num: 11, name: "switch-to-stock", sched: alone, switches: &kubeletSwitch{nodevolKubelet, stockKubelet}, expect: expectSwitch(stockKubelet), run: switchScenario(kubeletSwitch{nodevolKubelet, stockKubelet})},
	}
}

// servedByNodevol is the line a nodevol kubelet logs when it builds its
// volume plugins.
var servedByNodevol = regexp.MustCompile(`emptyDir volumes are served by nodevol`)

// errWrongKubelet is matched by the error for a kubelet binary of the other
// kind than its flag says (a stock binary passed as -nodevol).
var errWrongKubelet = errors.New("the kubelet binary is not of the kind its flag says")

// innerConfig is what the driver hands the namespace's PID 1, as JSON in
// a file.
type innerConfig struct {
	Workdir   string            `json:"workdir"`
	Kubelets  map[string]string `json:"kubelets"` // flavor -> binary
	Versions  map[string]string `json:"versions"` // flavor -> its --version
	Apiserver string            `json:"apiserver"`
	Images    []string          `json:"images"`
	// Exporter is the exporter scenario's image and DaemonSet; nil when
	// the scenario is not selected.
	Exporter *exporterInputs `json:"exporter,omitempty"`
	// CSI is the CSI scenario's image and manifests; nil when the
	// scenario is not selected.
	CSI *csiInputs `json:"csi,omitempty"`
	// KubeletAlert selects the series of the PrometheusRule's alert on
	// the kubelet's failed emptyDir teardowns (-deploy's), which the NAS
	// scenarios check on the real kubelet (scenarios mode).
	KubeletAlert *seriesSelector `json:"kubeletAlert,omitempty"`
	CgroupName   string          `json:"cgroupName"`
	Run          string          `json:"run"`
	// Mode is the driver's -mode: scenarios (empty), conformance, deploy.
	Mode string `json:"mode,omitempty"`
	// Cluster is the whole cluster's binaries (conformance and deploy).
	Cluster *clusterInputs `json:"cluster,omitempty"`
	// Conformance is the suite's (conformance), and the kubelet flavor
	// (deploy).
	Conformance *conformanceInputs `json:"conformance,omitempty"`
	// Deploy is the deploy scenario's images and manifests (and the
	// soak's).
	Deploy *deployInputs `json:"deploy,omitempty"`
	// Soak is the soak's parameters.
	Soak     *soakInputs `json:"soak,omitempty"`
	Start    time.Time   `json:"start"`
	Deadline time.Time   `json:"deadline"`
}

// innerResult is what it hands back.
type innerResult struct {
	Versions    map[string]string  `json:"versions"`
	Rows        []row              `json:"rows"`
	Conformance *conformanceResult `json:"conformance,omitempty"`
	Soak        *soakResult        `json:"soak,omitempty"`
	Error       string             `json:"error,omitempty"`
}

func resultPath(workdir string) string { return filepath.Join(workdir, "result.json") }

// runInner is the namespace's PID 1: it sets the namespace up, runs every
// selected scenario against each kubelet in turn, and writes the rows.
// When it returns, the kernel kills whatever is left in the namespace.
func runInner(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "e2e: inner half: want one argument, the config file")
		return 2
	}
	var cfg innerConfig
	b, err := os.ReadFile(args[0])
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "e2e: inner half: %v\n", err)
		return 2
	}
	log := newLogger(stderr, cfg.Start, "")
	ctx, cancel := context.WithDeadline(context.Background(), cfg.Deadline)
	defer cancel()
	res := innerResult{Versions: cfg.Versions}
	if err := enterNamespace(cfg.Workdir); err != nil {
		res.Error = fmt.Sprintf("setting up the namespace: %v", err)
	} else {
		switch cfg.Mode {
		case modeConformance:
			res.Conformance, err = runConformance(ctx, cfg, log)
		case modeDeploy:
			res.Rows, err = runDeploy(ctx, cfg, log)
		case modeSoak:
			res.Soak, err = runSoak(ctx, cfg, log)
		default:
			res.Rows, err = runAll(ctx, cfg, log)
		}
		if err != nil {
			res.Error = err.Error()
		}
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(resultPath(cfg.Workdir), out, 0o644); err != nil {
		fmt.Fprintf(stderr, "e2e: inner half: %v\n", err)
		return 2
	}
	return 0
}

// runAll runs the selected scenarios against every kubelet.
func runAll(ctx context.Context, cfg innerConfig, log *logger) ([]row, error) {
	selected, err := selectScenarios(cfg.Run)
	if err != nil {
		return nil, err
	}
	// One control plane for both kubelets, in turn: each registers the
	// same Node, and its mirror pods go with its static pods.
	cp, err := startControlPlane(ctx, filepath.Join(cfg.Workdir, "control-plane"), cfg.Apiserver, log)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	var rows []row
	for _, f := range flavors {
		on := scenariosFor(selected, f)
		if len(on) == 0 {
			continue
		}
		fr, err := runFlavor(ctx, cfg, cp, f, on, log.with(f.String()+": "))
		rows = append(rows, fr...)
		if err != nil {
			return rows, fmt.Errorf("%s kubelet: %w", f, err)
		}
	}
	for _, s := range selected {
		if s.switches == nil {
			continue
		}
		r, err := runSwitch(ctx, cfg, cp, s, log.with(s.switches.String()+": "))
		rows = append(rows, r)
		if err != nil {
			return rows, fmt.Errorf("%s kubelet: %w", s.switches, err)
		}
	}
	return rows, nil
}

// selectScenarios is the scenarios whose id matches -run.
func selectScenarios(run string) ([]scenario, error) {
	re, err := regexp.Compile(run)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	var selected []scenario
	for _, s := range scenarios() {
		if re.MatchString(s.id()) {
			selected = append(selected, s)
		}
	}
	if len(selected) == 0 {
		return nil, fmt.Errorf("-run %q selects no scenario", run)
	}
	return selected, nil
}

// scenariosFor is the scenarios that run against the flavor's kubelet (not
// those that switch kubelets: they have a node of their own).
func scenariosFor(selected []scenario, f flavor) []scenario {
	var out []scenario
	for _, s := range selected {
		if s.switches != nil {
			continue
		}
		if len(s.kubelets) == 0 || slices.Contains(s.kubelets, f) {
			out = append(out, s)
		}
	}
	return out
}

// runFlavor starts containerd and the flavor's kubelet on fresh private
// directories, runs the concurrent scenarios side by side, then the ones
// that must run alone, and stops both.
func runFlavor(ctx context.Context, cfg innerConfig, cp *controlPlane, f flavor, selected []scenario, log *logger) ([]row, error) {
	n, err := startNode(ctx, cfg, cp, filepath.Join(cfg.Workdir, f.String()), f.String(), f, log)
	if err != nil {
		return nil, err
	}
	defer n.stop()
	k := n.kubelet

	rows := make([]row, len(selected))
	outcomes := make([]*outcome, len(selected))
	runOne := func(i int) {
		s := selected[i]
		slog := log.with(s.id() + ": ")
		sdir, err := scenarioDir(cfg.Workdir, f, s)
		var o outcome
		t := time.Now()
		if err != nil {
			o.harness(err)
		} else {
			env := &scenarioEnv{flavor: f, kubelet: k, api: cp, dir: sdir, uid: podUID(f, s.num), podName: fmt.Sprintf("s%d-%s", s.num, s.name), exporter: cfg.Exporter, csi: cfg.CSI, kubeletAlert: cfg.KubeletAlert, log: slog}
			s.run(ctx, env, &o)
		}
		o.time("scenario", time.Since(t))
		outcomes[i] = &o
		rows[i] = makeRow(s, f, &o)
		slog.Printf("%s: %s", verdict(rows[i]), rows[i].Observed)
		for _, fl := range rows[i].Failures {
			slog.Printf("  ✗ %s", fl)
		}
	}
	var wg sync.WaitGroup
	for i, s := range selected {
		if s.sched == concurrent {
			wg.Go(func() { runOne(i) })
		}
	}
	wg.Wait()
	checkUnmountMetric(ctx, k, selected, outcomes, rows, f)
	for i, s := range selected {
		if s.sched == alone {
			runOne(i)
		}
	}
	return rows, nil
}

// node is one turn's containerd and kubelet, on fresh private host
// directories.
type node struct {
	containerd *containerd
	kubelet    *kubelet
	cp         *controlPlane
	log        *logger
}

// startNode covers the host directories with fresh tmpfs mounts, starts
// containerd with the run's images (checking nodevol's) and the flavor's
// kubelet, both with their state in dir and the kubelet under the run's
// cgroup cgroupSub, and checks that the kubelet is of its flavor.
func startNode(ctx context.Context, cfg innerConfig, cp *controlPlane, dir, cgroupSub string, f flavor, log *logger) (_ *node, err error) {
	if err := privateHostDirs(); err != nil {
		return nil, err
	}
	n := &node{cp: cp, log: log}
	defer func() {
		if err != nil {
			n.stop()
		}
	}()
	t0 := time.Now()
	if n.containerd, err = startContainerd(ctx, filepath.Join(dir, "containerd"), cfg.Images, log); err != nil {
		return nil, err
	}
	var ours []nodevolImage // nodevol's images the selected scenarios run
	if cfg.Exporter != nil {
		ours = append(ours, cfg.Exporter.Image)
	}
	if cfg.CSI != nil {
		ours = append(ours, cfg.CSI.Image)
	}
	for _, img := range ours {
		if err := n.containerd.checkImage(ctx, img); err != nil {
			return nil, err
		}
		log.Printf("containerd imported %s as %s, the digest recorded beside %s", img.Name, img.Digest, filepath.Base(img.Tar))
	}
	k, err := newKubelet(cfg.Kubelets[f.String()], filepath.Join(dir, "kubelet"), n.containerd.socket, "/"+cfg.CgroupName+"/"+cgroupSub, cp.kubeconfig, log)
	if err != nil {
		return nil, err
	}
	n.kubelet = k
	if err := k.start(ctx); err != nil {
		return nil, err
	}
	log.Printf("containerd and kubelet %s (%s) up in %.1fs", cfg.Kubelets[f.String()], cfg.Versions[f.String()], time.Since(t0).Seconds())
	// kubelet/hack/build.sh's nodevol build logs a line when it builds
	// its plugin list, a stock build never: a binary of the other kind is a
	// harness failure, before any row can pass for the wrong kubelet. (The
	// rows check what the teardown does too.)
	if err := checkKubeletKind(k, f); err != nil {
		return nil, err
	}
	return n, nil
}

// stop stops the kubelet and containerd, then kills whatever they left
// running (shims, containers) before the next turn.
func (n *node) stop() {
	if n.kubelet != nil {
		n.kubelet.stop()
	}
	if n.containerd != nil {
		n.containerd.stop()
	}
	if err := killAllBut(n.cp.pids(), 10*time.Second); err != nil {
		n.log.Printf("note: %v", err)
	}
}

func makeRow(s scenario, f flavor, o *outcome) row {
	return row{
		Scenario: s.id(),
		Kubelet:  f.String(),
		Peer:     f == stockKubelet && !s.nodevolOnStock,
		Expected: s.expect(f),
		Observed: strings.Join(o.observed, "; "),
		Details:  o.facts,
		OK:       len(o.failures) == 0,
		Failures: o.failures,
		Timings:  o.timings,
	}
}

// verdict is the row's last column: a nodevol row passes or fails; a
// stock row records the peer result or says it was not the expected one.
func verdict(r row) string {
	switch {
	case r.Peer && r.OK:
		return "peer recorded"
	case r.Peer:
		return "UNEXPECTED"
	case r.OK:
		return "PASS"
	}
	return "FAIL"
}

// checkUnmountMetric checks the kubelet's failed-unmount metric against the
// failed TearDowns the side-by-side scenarios saw in its log, all of them
// together (the counter is the kubelet's): it must count every one. The
// rows of the scenarios that saw failures get the fact, or the failure.
func checkUnmountMetric(ctx context.Context, k *kubelet, selected []scenario, outcomes []*outcome, rows []row, f flavor) {
	var idx []int
	logged := 0
	for i, s := range selected {
		if s.sched == concurrent && outcomes[i] != nil && outcomes[i].unmountFailures > 0 {
			idx = append(idx, i)
			logged += outcomes[i].unmountFailures
		}
	}
	if len(idx) == 0 {
		return
	}
	n, err := k.failedEmptyDirUnmounts(ctx)
	for _, i := range idx {
		o := outcomes[i]
		switch {
		case err != nil:
			o.harness(err)
		default:
			o.fact("kubelet metric: %g failed emptyDir volume_unmount operations (storage_operation_duration_seconds_count, status fail-unknown); the side-by-side scenarios' logs show %d", n, logged)
			o.want(n >= float64(logged), "the kubelet's metric counts %g failed emptyDir unmounts; the logs of the scenarios run beside each other show %d", n, logged)
		}
		rows[i] = makeRow(selected[i], f, o)
	}
}
