package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/httpserver"
	"github.com/nodevol/nodevol/internal/base/promtext"
	"github.com/nodevol/nodevol/internal/cli"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// defaultListen is serve's default address. 9477 is not taken by any
// exporter on Prometheus's default port allocation list.
const defaultListen = ":9477"

const serveHelp = `nodevol's node agent ("nodevol serve" runs it, with the same arguments):
scan the kubelet root (as "nodevol scan" does) every --interval, and
sooner when the mount table changes, and serve the results as
Prometheus metrics. It only reads: it never unmounts or
removes anything. Each scan re-examines the pods a change of the mount
table or of their volume directories can have affected, and every 30
intervals the whole root (docs/cli.md says why that misses no mount).

Endpoints, on --listen:
	/metrics   Prometheus metrics (see docs/metrics.md), unless
	           --secure-metrics-listen serves them over TLS to the
	           clients the API server authorises (docs/metrics.md)
	/healthz   200 while the process runs
	/readyz    200 once a scan completed, the last scan succeeded and
	           it is no older than 3 intervals; 503 otherwise

In a container, --root is the kubelet root as mounted into it (e.g.
/host/var/lib/kubelet, a hostPath with mountPropagation HostToContainer)
and --host-root the path the host knows it by, used in labels and logs.
When the process cannot be shown to be in the host's mount namespace it
says so in its log at every scan and in nodevol_mount_namespace.

It stops on SIGTERM or SIGINT: scanning stops and the server shuts down,
letting requests finish for up to 5 seconds. Exit status 0 after a
signal, 2 on bad usage or when it cannot listen.`

// serveOptions is what a server is made of. The zero values of clock,
// registry and logger are the real clock, a new registry and a discarding
// logger.
type serveOptions struct {
	root     string // as this process sees it
	hostRoot string // as the host names it: labels and logs
	interval time.Duration
	// rescan asks for a scan now (the mount table changed); nil: none.
	rescan <-chan struct{}
	// debounce is how long a rescan waits for more mount changes.
	debounce time.Duration
	ns       mountdetect.MountNamespace
	// propagationOf is mountdetect.PropagationOf (nil) but for tests.
	propagationOf func(string) (mountdetect.Propagation, error)
	version       cli.VersionInfo
	clock         clock.WithTicker
	registry      *promtext.Registry
	logger        logr.Logger
	// scanned, when set, is called after each scan (tests).
	scanned func()
	// scan scans a root; nil: an incremental scan (incrementalScan on
	// Linux) that scans the whole root at least every fullEvery, from the
	// mount namespace ns (scanOptionsFrom) (tests stand in for it).
	scan func(root string) (*cli.ScanReport, error)
	// fullEvery: 0 is cli.DefaultFullEvery intervals.
	fullEvery time.Duration
	// secure, when set, serves /metrics on secureLn only, over TLS, to
	// the clients the API server authenticates and authorises; the main
	// listener then serves /healthz and /readyz alone.
	secure   *httpserver.SecureOptions
	secureLn net.Listener
}

// server is serve's agent: a scan loop and its HTTP endpoints. It reads
// only.
type server struct {
	opts    serveOptions
	metrics *serveMetrics

	// vis is whether the host's mounts under the root are seen; only
	// the scan loop uses it.
	vis cli.RootVisibility
	// lastTook is how long the last scan took that a mount change asked
	// for (the scan loop's own): the first scan, and those at the
	// interval (a whole one every fullEvery), do not delay the next mount
	// change's.
	lastTook time.Duration

	secureSrv *http.Server // nil: /metrics on the main listener

	mu      sync.Mutex
	lastOK  time.Time // of the last successful scan; zero before
	lastErr error     // of the last scan
}

func newServer(opts serveOptions) (*server, error) {
	if opts.clock == nil {
		opts.clock = clock.RealClock{}
	}
	if opts.registry == nil {
		opts.registry = promtext.NewRegistry()
	}
	if opts.logger.GetSink() == nil {
		opts.logger = logr.Discard()
	}
	if opts.interval <= 0 {
		return nil, fmt.Errorf("interval %v: must be positive", opts.interval)
	}
	if opts.fullEvery <= 0 {
		opts.fullEvery = cli.DefaultFullEvery * opts.interval
	}
	if opts.scan == nil {
		opts.scan = cli.NewServeScan(opts.clock, opts.fullEvery, opts.interval/2, cli.ScanOptionsFrom(opts.ns)...)
	}
	m, err := newServeMetrics(opts.registry, opts.hostRoot, &opts.version)
	if err != nil {
		return nil, err
	}
	// The Go runtime's and the process's standard metrics beside serve's
	// own: goroutines, heap, resident memory, open descriptors, which
	// show whether the agent's footprint stays bounded. promtext's, as
	// client_golang's collectors export them: a binary that links
	// client_golang pays its initialisation at every start of every
	// command (docs/benchmarks.md).
	if err := errors.Join(promtext.RegisterGoMetrics(opts.registry), promtext.RegisterProcessMetrics(opts.registry)); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return nil, err
	}
	if opts.propagationOf == nil {
		opts.propagationOf = mountdetect.PropagationOf
	}
	m.setNamespace(opts.ns.State)
	s := &server{opts: opts, metrics: m}
	if opts.secure != nil {
		if opts.secureLn == nil {
			return nil, errors.New("secure metrics without a listener")
		}
		count, err := newAuthRequestsCounter(opts.registry)
		if err != nil {
			return nil, err
		}
		s.secureSrv, err = httpserver.NewSecure(s.metricsHandler(), serveHTTP, *opts.secure, httpserver.SecureMetrics{
			Count: count, Logger: opts.logger.WithName("metrics-auth"), Clock: opts.clock})
		if err != nil {
			return nil, err
		}
	}
	s.checkVisibility()
	return s, nil
}

// checkVisibility tells whether the host's mounts under the root are seen
// from here, logs it and exports it: a warning when they are not, a note
// when this is not the host's namespace but they are.
func (s *server) checkVisibility() {
	s.vis = cli.CheckRootVisibility(s.opts.ns, s.opts.root, s.opts.propagationOf)
	s.metrics.setVisible(s.vis.Visible())
	switch {
	case !s.vis.Visible():
		s.warnNotVisible()
	case s.opts.ns.State != mountdetect.MountNamespaceHost:
		s.opts.logger.Info("not in the host's mount namespace, but mounts made on the host under the kubelet root are seen here",
			"root", s.opts.hostRoot, "why", s.hostPaths(s.vis.Why()))
	}
}

// warnNotVisible logs that mounts the host makes under the root may be
// missed: at start and at every scan while it is so.
func (s *server) warnNotVisible() {
	s.opts.logger.Info("WARNING: mounts made on the host under the kubelet root may not be seen here, and volumes may look healthy that are not",
		"root", s.opts.hostRoot, "why", s.hostPaths(s.vis.Why()))
}

// metricsHandler serves the registry's metrics.
func (s *server) metricsHandler() http.Handler { return s.opts.registry }

// handler serves /healthz and /readyz, and /metrics unless the metrics are
// served securely on their own listener.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	if s.secureSrv == nil {
		mux.Handle("/metrics", s.metricsHandler())
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// ready is nil when a scan completed, the last one succeeded and the last
// success is no older than 3 intervals, else why not.
func (s *server) ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lastErr != nil:
		return fmt.Errorf("last scan failed: %w", s.lastErr)
	case s.lastOK.IsZero():
		return errors.New("no scan has completed yet")
	}
	if age := s.opts.clock.Since(s.lastOK); age > 3*s.opts.interval {
		return fmt.Errorf("last successful scan is %v old (more than 3 intervals of %v)", age.Round(time.Millisecond), s.opts.interval)
	}
	return nil
}

// scanLoop scans at once, then every interval and on each rescan request
// (after the debounce), until ctx is done.
func (s *server) scanLoop(ctx context.Context) {
	t := s.opts.clock.NewTicker(s.opts.interval)
	defer t.Stop()
	// tick: this scan is not one a mount change asked for (the first,
	// or one at the interval), and does not delay the next that is.
	tick := true
	for {
		took := s.scanOnce()
		if !tick {
			s.lastTook = took
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			tick = true
			continue
		case <-s.opts.rescan:
			tick = false
			s.opts.logger.V(2).Info("mount table changed; rescanning")
			// The debounce, and at least as long as the last scan took:
			// a container can mount and unmount in a loop, and must not
			// keep the agent scanning more than half the time.
			if wait := max(s.opts.debounce, s.lastTook); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-s.opts.clock.After(wait):
				}
			}
			// Changes during the debounce are in this scan.
			select {
			case <-s.opts.rescan:
			default:
			}
		}
	}
}

// maxLoggedPerScan is how many unhealthy volumes, and how many problems,
// a scan logs one by one; a line counts the rest. Whoever can write into
// a pod directory can make tens of thousands of entries that do not
// parse, and each scan (every interval and every mount change) would log
// them all. The metrics count them all.
const maxLoggedPerScan = 100

// scanOnce scans the root once, publishes the result and says how long
// the scan took.
func (s *server) scanOnce() time.Duration {
	log := s.opts.logger
	switch {
	case s.vis.Err() != nil:
		s.checkVisibility() // the root may exist now
	case !s.vis.Visible():
		s.warnNotVisible()
	}
	start := s.opts.clock.Now()
	rep, err := s.opts.scan(s.opts.root)
	took := s.opts.clock.Since(start)
	s.metrics.observe(rep, err, took, start)
	if err != nil {
		log.Error(err, "scan failed", "root", s.opts.hostRoot)
	} else {
		danger, unhealthy := 0, 0
		for i := range rep.Volumes() {
			v := rep.Volumes()[i]
			switch v.Verdict {
			case cli.VerdictDanger, cli.VerdictUnknown, cli.VerdictError:
				if v.Verdict == cli.VerdictDanger {
					danger++
				}
				if unhealthy++; unhealthy <= maxLoggedPerScan {
					log.Info("volume is not healthy", "verdict", v.Verdict, "reason", v.ReasonCode,
						"plugin", v.Plugin, "pod", v.PodUID, "volume", v.Volume, "path", s.hostPath(v.Path), "detail", s.hostPaths(v.Reason))
				}
			}
		}
		if unhealthy > maxLoggedPerScan {
			log.Info("more volumes are not healthy; not logged", "more", unhealthy-maxLoggedPerScan)
		}
		for i, p := range rep.Problems() {
			if i == maxLoggedPerScan {
				log.Info("more entries do not parse or cannot be read; not logged", "more", len(rep.Problems())-i)
				break
			}
			log.Info("entry does not parse or cannot be read", "path", s.hostPath(p.Problem), "error", s.hostPaths(p.Error))
		}
		if rep.Incomplete() {
			log.Info("WARNING: the scan is incomplete: a bound stopped it, and what is past it was not examined (the problems say where)",
				"root", s.opts.hostRoot, "podsOverBudget", rep.OverBudget())
		}
		log.V(1).Info("scan done", "root", s.opts.hostRoot, "volumes", len(rep.Volumes()), "danger", danger,
			"problems", len(rep.Problems()), "leftovers", rep.Leftovers(), "incomplete", rep.Incomplete(), "duration", took)
	}
	s.mu.Lock()
	s.lastErr = err
	if err == nil {
		s.lastOK = s.opts.clock.Now()
	}
	s.mu.Unlock()
	if s.opts.scanned != nil {
		s.opts.scanned()
	}
	return took
}

// hostPath is p (under root) as the host names it (under hostRoot).
func (s *server) hostPath(p string) string {
	if rest, ok := strings.CutPrefix(p, s.opts.root); ok && (rest == "" || rest[0] == filepath.Separator) {
		return s.opts.hostRoot + rest
	}
	return p
}

// hostPaths rewrites every mention of root in text to hostRoot.
func (s *server) hostPaths(text string) string {
	if s.opts.root == s.opts.hostRoot {
		return text
	}
	return strings.ReplaceAll(text, s.opts.root+string(filepath.Separator), s.opts.hostRoot+string(filepath.Separator))
}

// run scans and serves on ln until ctx is done, then stops scanning and
// shuts the server down, letting requests finish for up to grace.
func (s *server) run(ctx context.Context, ln net.Listener, grace time.Duration) error {
	srv := newHTTPServer(s.handler())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.scanLoop(ctx) })
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(ln) }()
	if s.secureSrv != nil {
		go func() { serveErr <- s.secureSrv.ServeTLS(s.opts.secureLn, "", "") }()
		s.opts.logger.Info("serving /metrics over TLS to clients the API server authorises", "address", s.opts.secureLn.Addr().String())
	}
	s.opts.logger.Info("serving", "address", ln.Addr().String(), "root", s.opts.hostRoot, "interval", s.opts.interval)
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	cancel()
	shutCtx, done := context.WithTimeout(context.Background(), grace)
	defer done()
	if serr := srv.Shutdown(shutCtx); serr != nil && err == nil {
		err = serr
	}
	if s.secureSrv != nil {
		if serr := s.secureSrv.Shutdown(shutCtx); serr != nil && err == nil {
			err = serr
		}
	}
	// A scan in flight is waited for no longer than the grace period: one
	// that never returns (a filesystem that stopped answering) must not
	// keep the agent from exiting.
	scanDone := make(chan struct{})
	go func() { wg.Wait(); close(scanDone) }()
	select {
	case <-scanDone:
	case <-shutCtx.Done():
		s.opts.logger.Info("a scan has not returned within the grace period; stopping without it", "grace", grace)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	s.opts.logger.Info("stopped")
	return err
}

// minInterval is the shortest --interval serve takes. A scan reads the
// mount table and checks every pod's directories, and every
// cli.DefaultFullEvery intervals reads the whole kubelet root (about 0.5 s of
// CPU on a node with 10,000 volumes: docs/benchmarks.md); a change of the
// mount table starts one at once whatever the interval, so a shorter one
// would only keep the agent busy.
const minInterval = time.Second

// serveArgs is what serve's command line says.
type serveArgs struct {
	listen, root, hostRoot string
	secureListen           string
	secure                 httpserver.SecureOptions
	interval               time.Duration
	verbosity              int
	version                bool // --version: say it and exit
	ns                     *cli.NamespaceFlags
}

// parseServeArgs declares serve's flags on fs and parses args, with the
// checks that need nothing but the arguments. A code >= 0 is serve's exit
// code: the help was printed, or the mistake said on stderr.
func parseServeArgs(fs *cli.FlagSet, args []string, stderr io.Writer) (a serveArgs, code int) {
	fs.StringVar(&a.listen, "listen", defaultListen, "serve the endpoints on `ADDR`")
	fs.DurationVar(&a.interval, "interval", 10*time.Second, "scan every `DURATION`, at least 1s (and sooner when the mount table changes)")
	fs.StringVar(&a.root, "root", volume.DefaultRoot, "the kubelet root directory as this process sees it")
	fs.StringVar(&a.hostRoot, "host-root", "", "the kubelet root as the host names it, in labels and logs (default --root)")
	fs.IntVar(&a.verbosity, "v", 0, "log verbosity: 1 logs each scan, 2 each mount table change")
	fs.BoolVar(&a.version, "version", false, "print the agent's version (as \"nodevol version\" reports nodevol's) and exit")
	fs.StringVar(&a.secureListen, "secure-metrics-listen", "", "serve /metrics on `ADDR` only, over TLS, to clients the API server authenticates and authorises for get on /metrics (--listen keeps /healthz and /readyz); empty: /metrics on --listen, to anyone")
	a.secure.AddFlags(fs.FlagSet)
	a.ns = cli.AddNamespaceFlags(fs.FlagSet, false)
	extra, code := cli.ParseArgs(fs, args)
	if code >= 0 {
		return a, code
	}
	if len(extra) > 0 {
		return a, cli.UsageError(fs, stderr, "serve takes no arguments (got %q)", extra[0])
	}
	if a.root == "" {
		return a, cli.UsageError(fs, stderr, "--root must not be empty")
	}
	if err := a.secure.Check(); err != nil {
		return a, cli.UsageError(fs, stderr, "%v", err)
	}
	if a.secureListen == "" && a.secure != (httpserver.SecureOptions{}) {
		return a, cli.UsageError(fs, stderr, "the TLS and API server flags need --secure-metrics-listen")
	}
	switch {
	case a.interval <= 0:
		return a, cli.UsageError(fs, stderr, "--interval must be positive (got %v)", a.interval)
	case a.interval < minInterval:
		return a, cli.UsageError(fs, stderr, "--interval %v is too short: at least %v (each scan reads the whole kubelet root, and a mount change starts one sooner anyway)", a.interval, minInterval)
	}
	if err := cli.RefuseDotDot(a.root); err != nil {
		fmt.Fprintf(stderr, "nodevol-agent: --root: %s\n", cli.Display(err.Error()))
		return a, cli.ExitError
	}
	return a, -1
}

// Main is the agent, nodevol-agent, run with args (os.Args[1:], or what
// follows "nodevol serve", which runs it): it writes its log to stderr,
// its help to stdout, and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	a, code := parseServeArgs(newFlagSet(stdout, stderr), args, stderr)
	if code >= 0 {
		return code
	}
	if a.version {
		bi, ok := debug.ReadBuildInfo()
		fmt.Fprintln(stdout, cli.AgentName, cli.NewVersionInfo(bi, ok).Version)
		return cli.ExitOK
	}
	dir, err := filepath.Abs(a.root)
	if err != nil {
		fmt.Fprintf(stderr, "nodevol-agent: %s\n", cli.Display(err.Error()))
		return cli.ExitError
	}
	if a.hostRoot == "" {
		a.hostRoot = dir
	}
	ns, err := a.ns.Namespace("serve")
	if err != nil {
		fmt.Fprintf(stderr, "nodevol-agent: %s\n", cli.Display(err.Error()))
		return cli.ExitError
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(stderr), textlogger.Verbosity(a.verbosity))).WithName("serve")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	bi, ok := debug.ReadBuildInfo()
	opts := serveOptions{
		root: dir, hostRoot: filepath.Clean(a.hostRoot), interval: a.interval,
		debounce: 100 * time.Millisecond, ns: ns, version: cli.NewVersionInfo(bi, ok), logger: logger,
	}
	ln, err := net.Listen("tcp", a.listen)
	if err != nil {
		fmt.Fprintf(stderr, "nodevol-agent: %s\n", cli.Display(err.Error()))
		return cli.ExitError
	}
	if a.secureListen != "" {
		if opts.secureLn, err = net.Listen("tcp", a.secureListen); err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "nodevol-agent: %s\n", cli.Display(err.Error()))
			return cli.ExitError
		}
		opts.secure = &a.secure
	}
	opts.rescan = watchMountTable(ctx, logger)
	s, err := newServer(opts)
	if err != nil {
		ln.Close()
		if opts.secureLn != nil {
			opts.secureLn.Close()
		}
		fmt.Fprintf(stderr, "nodevol-agent: %s\n", cli.Display(err.Error()))
		return cli.ExitError
	}
	if err := s.run(ctx, ln, 5*time.Second); err != nil {
		logger.Error(err, "server failed")
		return cli.ExitError
	}
	return cli.ExitOK
}
