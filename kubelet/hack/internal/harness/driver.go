package harness

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// E2E is the e2e command (kubelet/hack/e2e): its flags are args; it
// returns the exit status.
func E2E(args []string, stdout, stderr io.Writer) int {
	if code, ok := reexecuted(args, stdout, stderr); ok {
		return code
	}
	return run(args, stdout, stderr)
}

// reexecuted runs the half of a driver that the driver re-executes itself
// as — the namespace's PID 1 (innerArg) or a node's holder
// (nodeHolderArg) — when args say so; ok is false otherwise.
func reexecuted(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	switch {
	case len(args) > 0 && args[0] == innerArg:
		return runInner(args[1:], stderr), true
	case len(args) > 0 && args[0] == nodeHolderArg:
		return runNodeHolder(args[1:], os.Stdin, stdout, stderr), true
	}
	return 0, false
}

// options are the driver's flags.
type options struct {
	stock, nodevol string
	apiserver      string
	run            string
	timeout        time.Duration
	workdir        string
	// nodevolImage is the exporter's image tarball (with FILE.digest
	// beside it); empty: the driver builds it with the root module's
	// ./hack/image.
	nodevolImage string
	deploy       string // the manifests directory holding the DaemonSet
	// csiImage is nodevol-csi's image tarball (with FILE.digest beside
	// it); empty: the driver builds it with the root module's ./hack/image.
	csiImage  string
	csiDeploy string // deploy/csi: the CSI scenario's manifests
	chart     string // deploy/helm/nodevol: the deploy mode's chart
	// csiRolloutImage is the nodevol-csi image the deploy mode's rolling
	// update moves to; empty: csiImage, rewritten with another digest.
	csiRolloutImage string

	// mode is what the run does: modeScenarios (nodevol's own scenarios
	// on a one-node control plane) or modeConformance (Kubernetes's e2e
	// tests on a whole cluster).
	mode string
	// The whole cluster's binaries, and the suite's.
	scheduler, controllerManager string
	e2eTest, ginkgo, agnhost     string
	procs                        int
	kubelets                     []string // the flavors the suite runs against, in order; the soak's nodes'
	// soak is the soak's parameters (modeSoak).
	soak *soakInputs
}

// The driver's modes.
const (
	modeScenarios   = "scenarios"
	modeConformance = "conformance"
	modeDeploy      = "deploy"
	// modeSoak is kubelet/hack/soak's: churn and faults on a two-node
	// cluster.
	modeSoak = "soak"
)

const usageLine = `usage: go run ./hack/e2e -stock KUBELET -nodevol KUBELET -apiserver KUBE-APISERVER [-run REGEXP] [-timeout 15m] [-workdir DIR] [-nodevol-image FILE] [-deploy DIR] [-csi-image FILE] [-csi-deploy DIR]
       go run ./hack/e2e -mode conformance [-stock KUBELET] [-nodevol KUBELET] [-kubelets stock,nodevol] -apiserver KUBE-APISERVER -scheduler KUBE-SCHEDULER -controller-manager KUBE-CONTROLLER-MANAGER -e2e-test E2E.TEST -agnhost AGNHOST [-ginkgo GINKGO -procs N] [-timeout 90m] [-workdir DIR]
       go run ./hack/e2e -mode deploy -stock KUBELET | -nodevol KUBELET -kubelets nodevol -apiserver KUBE-APISERVER -scheduler KUBE-SCHEDULER -controller-manager KUBE-CONTROLLER-MANAGER [-nodevol-image FILE] [-csi-image FILE] [-csi-rollout-image FILE] [-chart DIR] [-workdir DIR]`

// newFlagSet is a command's flag set: errors and usage go to stderr, the
// usage line first.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// binaryFlags are the flags naming the Kubernetes binaries a run starts;
// clusterNote says when the scheduler and controller manager are needed.
func (o *options) binaryFlags(fs *flag.FlagSet, clusterNote string) {
	fs.StringVar(&o.stock, "stock", "", "the stock kubelet binary (upstream v1.37.2)")
	fs.StringVar(&o.nodevol, "nodevol", "", "the nodevol kubelet binary (kubelet/hack/build.sh)")
	fs.StringVar(&o.apiserver, "apiserver", "", "kube-apiserver of the kubelets' version (kubelet/hack/build.sh --apiserver)")
	fs.StringVar(&o.scheduler, "scheduler", "", "kube-scheduler of the kubelets' version (kubelet/hack/build.sh --scheduler"+clusterNote+")")
	fs.StringVar(&o.controllerManager, "controller-manager", "", "kube-controller-manager of the kubelets' version (kubelet/hack/build.sh --controller-manager"+clusterNote+")")
}

// kubeletBinaries are the binary flags of the kubelets o.kubelets names
// (list, as the -kubelets flag gave it), each of which must have its flag.
func (o *options) kubeletBinaries(list string) ([]*string, error) {
	var bins []*string
	for _, k := range o.kubelets {
		switch {
		case k == stockKubelet.String() && o.stock != "":
			bins = append(bins, &o.stock)
		case k == nodevolKubelet.String() && o.nodevol != "":
			bins = append(bins, &o.nodevol)
		default:
			return nil, fmt.Errorf("-kubelets %s: %q is not stock or nodevol with its binary's flag", list, k)
		}
	}
	return bins, nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := newFlagSet("e2e", usageLine, stderr)
	o.binaryFlags(fs, "; -mode conformance or deploy")
	fs.StringVar(&o.run, "run", "", "run only the scenarios whose id (\"1-nas-tmpfs\") matches this regexp")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "the watchdog kills the namespace after this long")
	fs.StringVar(&o.workdir, "workdir", "", "work directory, kept afterwards (default: a temporary one, removed when the run passes)")
	fs.StringVar(&o.nodevolImage, "nodevol-image", "", "the nodevol image, an OCI layout tarball with `FILE`.digest beside it, from the root module's ./hack/image (default: built by the driver)")
	fs.StringVar(&o.deploy, "deploy", "../deploy", "the `DIR`ectory of nodevol's manifests, whose DaemonSet the exporter scenario runs, and whose PrometheusRule's kubelet alert the NAS scenarios check")
	fs.StringVar(&o.csiImage, "csi-image", "", "the nodevol-csi image, an OCI layout tarball with `FILE`.digest beside it, from the root module's ./hack/image -binary nodevol-csi (default: built by the driver)")
	fs.StringVar(&o.csiRolloutImage, "csi-rollout-image", "", "-mode deploy: the nodevol-csi image `FILE` the rolling update moves to, named as -csi-image is (another build: an upgrade from -csi-image, or a rollback to an older one); default: -csi-image with another digest")
	fs.StringVar(&o.csiDeploy, "csi-deploy", "../deploy/csi", "the `DIR`ectory of nodevol-csi's manifests, which the CSI scenario applies")
	fs.StringVar(&o.chart, "chart", "../deploy/helm/nodevol", "the `DIR`ectory of nodevol's Helm chart, which -mode deploy renders and installs")
	fs.StringVar(&o.mode, "mode", modeScenarios, "scenarios: nodevol's scenarios on a one-node control plane; conformance: Kubernetes's e2e volume specs (e2e.test) on a whole cluster, against each of -kubelets; deploy: the Helm chart rendered and installed through the API on a two-node cluster of the first of -kubelets (default stock)")
	fs.StringVar(&o.e2eTest, "e2e-test", "", "upstream's e2e.test of the kubelets' version (kubelet/hack/build.sh --e2e-test; -mode conformance)")
	fs.StringVar(&o.agnhost, "agnhost", "", "the suite's agnhost binary (kubelet/hack/build.sh --agnhost; -mode conformance)")
	fs.StringVar(&o.ginkgo, "ginkgo", "", "the ginkgo CLI (kubelet/hack/build.sh --ginkgo), which runs e2e.test in -procs processes")
	fs.IntVar(&o.procs, "procs", 1, "parallel e2e.test processes (more than 1 needs -ginkgo)")
	kubelets := fs.String("kubelets", "", "the kubelets the suite runs against, in order (-mode conformance; default stock,nodevol), or the two nodes' kubelet (-mode deploy; default stock)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, errors.New("no arguments, only flags")
	}
	bins := []*string{&o.apiserver}
	switch o.mode {
	case modeScenarios:
		if o.stock == "" || o.nodevol == "" || o.apiserver == "" {
			fs.Usage()
			return o, errors.New("want -stock, -nodevol and -apiserver")
		}
		bins = append(bins, &o.stock, &o.nodevol)
	case modeConformance, modeDeploy:
		if *kubelets == "" {
			*kubelets = map[string]string{modeConformance: "stock,nodevol", modeDeploy: "stock"}[o.mode]
		}
		o.kubelets = strings.Split(*kubelets, ",")
		if o.mode == modeDeploy && len(o.kubelets) != 1 {
			return o, fmt.Errorf("-mode deploy: -kubelets %s: want one kubelet", *kubelets)
		}
		kb, err := o.kubeletBinaries(*kubelets)
		if err != nil {
			return o, err
		}
		bins = append(bins, kb...)
		if o.procs > 1 && o.mode == modeConformance {
			bins = append(bins, &o.ginkgo)
		}
		bins = append(bins, &o.scheduler, &o.controllerManager)
		if o.mode == modeConformance {
			bins = append(bins, &o.e2eTest, &o.agnhost)
		}
		for _, p := range bins {
			if *p == "" {
				fs.Usage()
				return o, fmt.Errorf("-mode %s wants -apiserver, -scheduler, -controller-manager, the binary of each of -kubelets, and for conformance -e2e-test, -agnhost and -ginkgo with -procs > 1", o.mode)
			}
		}
	default:
		return o, fmt.Errorf("-mode %q: want %s, %s or %s", o.mode, modeScenarios, modeConformance, modeDeploy)
	}
	for _, p := range bins {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return o, err
		}
		if fi, err := os.Stat(abs); err != nil || fi.Mode()&0o111 == 0 {
			return o, fmt.Errorf("binary %s: not an executable file (%v)", abs, err)
		}
		*p = abs
	}
	for _, p := range []*string{&o.nodevolImage, &o.deploy, &o.csiImage, &o.csiDeploy, &o.chart, &o.csiRolloutImage} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return o, err
		}
		*p = abs
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "e2e:", err)
		}
		return 2
	}
	return runDriver(opts, stdout, stderr)
}

// runDriver runs the driver with its options: it takes the host, runs the
// namespace under the watchdog, and prints the result.
func runDriver(opts options, stdout, stderr io.Writer) int {
	start := time.Now()
	log := newLogger(stderr, start, "")
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "e2e: must run as root (namespaces, mounts, cgroups)")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// One run holds the host at a time. The watchdog's time starts once the
	// lock is held: a run queued behind another gets its whole -timeout.
	release, err := lockHost(ctx, hostLockName, log)
	if err != nil {
		fmt.Fprintf(stderr, "e2e: HARNESS FAILURE: %v\n", err)
		return 2
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()

	res, runErr := drive(ctx, opts, start, log)
	code := 0
	if runErr != nil {
		fmt.Fprintf(stderr, "e2e: HARNESS FAILURE: %v\n", runErr)
		code = 2
	}
	switch {
	case res != nil && res.Soak != nil && opts.mode == modeSoak:
		printSoak(stdout, res.Soak, time.Since(start))
		if code == 0 && len(res.Soak.Violations) > 0 {
			code = 1
		}
	case res != nil && res.Conformance != nil && opts.mode == modeConformance:
		printConformance(stdout, res.Conformance, time.Since(start))
		if code == 0 && len(conformanceProblems(res.Conformance)) > 0 {
			code = 1
		}
	case res != nil:
		printReport(stdout, res, time.Since(start))
		if code == 0 && !allAsExpected(res.Rows) {
			code = 1
		}
	}
	return code
}

// passed says whether the result is a pass of its mode.
func (res *innerResult) passed() bool {
	switch {
	case res.Soak != nil:
		return len(res.Soak.Violations) == 0
	case res.Conformance != nil:
		return len(conformanceProblems(res.Conformance)) == 0
	}
	return allAsExpected(res.Rows)
}

// allAsExpected says whether every row is as expected and none is missing.
func allAsExpected(rows []row) bool {
	if len(rows) == 0 {
		return false
	}
	for _, r := range rows {
		if !r.OK {
			return false
		}
	}
	return true
}

// drive prepares the host, runs the namespace under the watchdog, cleans
// up and checks that the host is as before. It returns the namespace's
// rows even when the host check fails.
func drive(ctx context.Context, opts options, start time.Time, log *logger) (res *innerResult, err error) {
	workdir, keep := opts.workdir, opts.workdir != ""
	if workdir == "" {
		if workdir, err = os.MkdirTemp("", "nodevol-e2e-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(workdir, 0o755); err != nil {
		return nil, err
	}
	if workdir, err = filepath.Abs(workdir); err != nil {
		return nil, err
	}
	log.Printf("workdir %s", workdir)
	defer func() {
		if err != nil || res == nil || !res.passed() {
			keep = true
		}
		if keep {
			log.Printf("kept %s (kubelet and containerd logs under <flavor>/)", workdir)
			return
		}
		if rmErr := removeWorkdir(workdir); rmErr != nil && err == nil {
			err = rmErr
		}
	}()

	t := time.Now()
	if opts.mode != modeScenarios {
		if err := ensurePackages(ctx, append(slices.Clone(binaries), clusterBinaries...), log); err != nil {
			return nil, err
		}
		images, err := buildSuiteImages(ctx, filepath.Join(workdir, "images"), "/bin/busybox", opts.agnhost)
		if err != nil {
			return nil, err
		}
		var deploy *deployInputs
		switch opts.mode {
		case modeDeploy:
			if deploy, err = prepareDeploy(ctx, opts, filepath.Join(workdir, "images"), true, log); err != nil {
				return nil, err
			}
			images = append(images, deploy.Agent.Tar, deploy.AgentRollout.Tar, deploy.CSI.Tar, deploy.CSIRollout.Tar)
		case modeSoak:
			if deploy, err = prepareDeploy(ctx, opts, filepath.Join(workdir, "images"), false, log); err != nil {
				return nil, err
			}
			images = append(images, deploy.Agent.Tar, deploy.CSI.Tar)
		}
		log.Printf("packages and images ready in %.1fs", time.Since(t).Seconds())
		return driveNamespace(ctx, opts, workdir, images, nil, nil, deploy, start, log)
	}
	if err := ensurePackages(ctx, binaries, log); err != nil {
		return nil, err
	}
	images, err := buildImages(ctx, filepath.Join(workdir, "images"), "/bin/busybox")
	if err != nil {
		return nil, err
	}
	exporter, err := prepareExporter(ctx, opts, filepath.Join(workdir, "images"), log)
	if err != nil {
		return nil, err
	}
	if exporter != nil {
		images = append(images, exporter.Image.Tar)
	}
	csi, err := prepareCSI(ctx, opts, filepath.Join(workdir, "images"), log)
	if err != nil {
		return nil, err
	}
	if csi != nil {
		images = append(images, csi.Image.Tar)
	}
	log.Printf("packages and images ready in %.1fs", time.Since(t).Seconds())
	return driveNamespace(ctx, opts, workdir, images, exporter, csi, nil, start, log)
}

// driveNamespace snapshots the host, runs the namespace, cleans up, and
// compares the host with the snapshot; it returns the namespace's result.
func driveNamespace(ctx context.Context, opts options, workdir string, images []string, exporter *exporterInputs, csi *csiInputs, deploy *deployInputs, start time.Time, log *logger) (res *innerResult, err error) {
	cgroupName := fmt.Sprintf("nodevol-e2e-%d", os.Getpid())
	cgroups, err := cgroupRoots(cgroupName)
	if err != nil {
		return nil, err
	}
	before, err := snapshotHost(workdir, cgroups, cgroupName)
	if err != nil {
		return nil, err
	}
	var restoreHugePages func() error
	if opts.soak != nil && opts.soak.HugePages > 0 {
		if restoreHugePages, err = reserveHugePages(opts.soak.HugePages, log); err != nil {
			return nil, err
		}
	}
	nsErr := runNamespace(ctx, opts, workdir, images, exporter, csi, deploy, cgroupName, cgroups, start, log)
	// The pool goes back before the clean-up, which puts back (and
	// reports) any watched sysctl the run left changed.
	var restoreErr error
	if restoreHugePages != nil {
		restoreErr = restoreHugePages()
	}
	cleanErr := errors.Join(restoreErr, cleanHost(before, cgroups))
	after, err := snapshotHost(workdir, cgroups, cgroupName)
	if err != nil {
		return nil, err
	}
	hostErr := errors.Join(cleanErr, compareHost(before, after, workdir))
	if hostErr == nil {
		log.Printf("host as before: no mounts, processes, cgroups, directories or sysctl changes left")
	}
	if nsErr != nil {
		return nil, errors.Join(nsErr, hostErr)
	}
	b, err := os.ReadFile(resultPath(workdir))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("the namespace left no result: %w", err), hostErr)
	}
	res = new(innerResult)
	if err := json.Unmarshal(b, res); err != nil {
		return nil, errors.Join(err, hostErr)
	}
	if res.Error != "" {
		return res, errors.Join(errors.New(res.Error), hostErr)
	}
	return res, hostErr
}

// runNamespace creates the host directories and cgroups the namespace
// needs, re-executes the binary as PID 1 of new mount, pid and network
// namespaces and waits for it, killing it when ctx ends (the watchdog:
// with its PID 1 gone, the kernel kills everything in the namespace).
func runNamespace(ctx context.Context, opts options, workdir string, images []string, exporter *exporterInputs, csi *csiInputs, deploy *deployInputs, cgroupName string, cgroups []string, start time.Time, log *logger) error {
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); os.IsNotExist(err) {
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
		}
	}
	var subs []string
	for _, f := range flavors {
		subs = append(subs, f.String())
		if opts.mode != modeScenarios {
			for i := 1; i <= deployNodes; i++ {
				subs = append(subs, fmt.Sprintf("%s/node-%d", f, i))
			}
		}
	}
	if opts.mode == modeScenarios {
		// A scenario that switches kubelets runs on a node of its own.
		for _, s := range scenarios() {
			if s.switches != nil {
				subs = append(subs, s.id())
			}
		}
	}
	if err := makeCgroups(cgroups, subs); err != nil {
		return err
	}
	versions := map[string]string{}
	kubelets := map[string]string{}
	for f, bin := range map[flavor]string{stockKubelet: opts.stock, nodevolKubelet: opts.nodevol} {
		if bin == "" {
			continue
		}
		kubelets[f.String()] = bin
		out, err := exec.CommandContext(ctx, bin, "--version").Output()
		if err != nil {
			return fmt.Errorf("%s --version: %w", bin, err)
		}
		versions[f.String()] = strings.TrimSpace(string(out))
	}
	if opts.mode != modeScenarios {
		for name, bin := range map[string]string{"kube-apiserver": opts.apiserver, "kube-scheduler": opts.scheduler, "kube-controller-manager": opts.controllerManager, "e2e.test": opts.e2eTest} {
			if bin == "" {
				continue
			}
			out, err := exec.CommandContext(ctx, bin, "--version").Output()
			if err != nil {
				return fmt.Errorf("%s --version: %w", bin, err)
			}
			versions[name] = strings.TrimSpace(string(out))
		}
		versions["etcd"], versions["containerd"], versions["runc"], versions["cni plugins"] = debianVersion(ctx, "etcd-server"), debianVersion(ctx, "containerd"), debianVersion(ctx, "runc"), debianVersion(ctx, "containernetworking-plugins")
	}
	deadline, _ := ctx.Deadline()
	cfg := innerConfig{
		Workdir:    workdir,
		Kubelets:   kubelets,
		Apiserver:  opts.apiserver,
		Versions:   versions,
		Images:     images,
		Exporter:   exporter,
		CSI:        csi,
		CgroupName: cgroupName,
		Run:        opts.run,
		Mode:       opts.mode,
		Start:      start,
		Deadline:   deadline.Add(-innerMargin(opts.timeout)),
	}
	if opts.mode == modeScenarios {
		sel, err := alertSelector(ruleFile(opts.deploy), kubeletTeardownAlert)
		if err != nil {
			return err
		}
		cfg.KubeletAlert = &sel
	}
	if opts.mode != modeScenarios {
		cfg.Cluster = &clusterInputs{Scheduler: opts.scheduler, ControllerManager: opts.controllerManager, Nodes: 1}
		cfg.Conformance = &conformanceInputs{E2ETest: opts.e2eTest, Ginkgo: opts.ginkgo, Procs: opts.procs, Kubelets: opts.kubelets}
	}
	switch opts.mode {
	case modeDeploy:
		cfg.Cluster.Nodes = deployNodes
		cfg.Deploy = deploy
	case modeSoak:
		cfg.Cluster.Nodes = len(opts.kubelets)
		cfg.Deploy = deploy
		cfg.Soak = opts.soak
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(workdir, "inner.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Pdeathsig is sent when the thread that started the child exits:
	// keep this goroutine on its thread until the child is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(self, innerArg, cfgPath)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: namespaceFlags, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("entering the namespaces: %w", err)
	}
	log.Printf("namespace PID 1 is pid %d on the host", cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("namespace PID 1: %w", err)
		}
		return nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("watchdog: killed the namespace: %w", context.Cause(ctx))
	}
}

// innerMargin is how long before the watchdog the namespace's own
// deadline is, so that it can stop its daemons and report first.
func innerMargin(timeout time.Duration) time.Duration {
	return min(15*time.Second, timeout/10)
}

// cleanHost removes what runNamespace created: the cgroups (bottom-up,
// retried) and the host directories that did not exist before.
func cleanHost(before hostState, cgroups []string) error {
	errs := []error{removeCgroups(cgroups)}
	// A sysctl the kubelet changed on the host (its masking failed) is put
	// back — and still fails the run.
	for key, was := range before.Sysctls {
		path := filepath.Join("/proc/sys", key)
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if now := strings.TrimSpace(string(b)); now != was {
			err := os.WriteFile(path, []byte(was+"\n"), 0o644)
			errs = append(errs, fmt.Errorf("host sysctl %s was changed from %s to %s during the run (restored: %v)", key, was, now, err == nil))
		}
	}
	for _, d := range hostDirs {
		if !before.Dirs[d] {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
