// Command nodevol-csi is nodevol's CSI node plugin: inline ephemeral
// volumes with emptyDir semantics whose teardown never deletes data on
// another mount (see package github.com/nodevol/nodevol/csi/driver).
//
//	nodevol-csi --node-id "$NODE_NAME"
//
// It serves the CSI Identity and Node services on --endpoint and the
// kubelet's plugin-registration API in --registration-dir itself (no
// node-driver-registrar sidecar), and /metrics, /healthz and /readyz on
// --http-address (/metrics on --secure-metrics-address instead, over TLS
// to the clients the API server authorises, when it is set).
// deploy/csi/ runs it as a DaemonSet.
//
// One nodevol-csi per driver name and kubelet root: before anything else
// it takes the root's lock for its driver name
// (<root>/nodevol-csi-<name>.lock, released when the process ends); a
// second one exits with status 1, naming the first's PID, program and
// start time.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodevol/nodevol/csi/driver"
	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/httpserver"
	"github.com/nodevol/nodevol/httpserver/kubeauth"
)

// httpLimits are the limits of the HTTP server on --http-address:
// httpserver's defaults (zero fields), as nodevol serve's: anything that
// can reach the driver's pod can connect. Tests shorten them.
var httpLimits httpserver.Limits

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command; it serves until ctx is done (SIGTERM or SIGINT) and
// returns the exit status: 0 after a clean stop, 1 when serving failed (or
// another nodevol-csi of the same driver name serves the kubelet root), 2
// for bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nodevol-csi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("driver-name", driver.DefaultName, "the driver's name (the CSIDriver object's and the pods' csi.driver)")
	endpoint := fs.String("endpoint", "/csi/csi.sock", "the CSI socket, as this process sees it")
	kubeletEndpoint := fs.String("kubelet-endpoint", "", "the CSI socket as the kubelet sees it (default <kubelet-root>/plugins/<driver-name>/csi.sock)")
	regDir := fs.String("registration-dir", "/registration", "the kubelet's plugins_registry directory as this process sees it; empty: do not register")
	root := fs.String("kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir, mounted at the same path")
	nodeID := fs.String("node-id", os.Getenv("NODE_NAME"), "the node's name (default $NODE_NAME)")
	httpAddr := fs.String("http-address", ":9479", "where to serve /metrics, /healthz and /readyz; empty: nowhere")
	secureAddr := fs.String("secure-metrics-address", "", "serve /metrics here only, over TLS, to clients the API server authenticates and authorises for get on /metrics (--http-address keeps /healthz and /readyz); empty: /metrics on --http-address, to anyone")
	var secure httpserver.SecureOptions
	secure.AddFlags(fs)
	quotas := fs.Bool("quotas", true, "give Default volumes a project quota whose hard limit is their sizeLimit, where the filesystem has project quotas")
	stateDir := fs.String("state-dir", "/csi", "where the quota bookkeeping (projects, projid) is kept across restarts")
	memory := fs.Int64("memory-bytes", -1, "upper bound of a Memory volume's tmpfs in bytes (default: the node's MemTotal)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	logCfg := textlogger.NewConfig()
	logCfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	version := buildVersion()
	if *showVersion {
		fmt.Fprintln(stdout, "nodevol-csi", version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "nodevol-csi: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := secure.Check(); err != nil {
		fmt.Fprintln(stderr, "nodevol-csi:", err)
		return 2
	}
	if *secureAddr == "" && secure != (httpserver.SecureOptions{}) {
		fmt.Fprintln(stderr, "nodevol-csi: the TLS and API server flags need --secure-metrics-address")
		return 2
	}
	log := textlogger.NewLogger(logCfg)
	if *kubeletEndpoint == "" {
		*kubeletEndpoint = filepath.Join(*root, "plugins", *name, "csi.sock")
	}
	if *memory < 0 {
		total, err := memTotal()
		if err != nil {
			log.Error(err, "Reading the node's memory; Memory volumes are bounded by their sizeLimit only")
		}
		*memory = total
	}
	cfg := driver.Config{
		Name:        *name,
		Version:     version,
		NodeID:      *nodeID,
		KubeletRoot: filepath.Clean(*root),
		MemoryBytes: *memory,
		Logger:      log,
	}
	if *quotas {
		cfg.Quotas = fsquota.New(fsquota.Enforce(), fsquota.WithLogger(log),
			fsquota.WithProjectsFile(filepath.Join(*stateDir, "projects")),
			fsquota.WithProjidFile(filepath.Join(*stateDir, "projid")))
	}
	reg := prometheus.NewRegistry()
	// The Go runtime's and the process's standard metrics beside the
	// driver's: goroutines, heap, resident memory, open descriptors.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registerer = reg
	d, err := driver.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "nodevol-csi:", err)
		return 2
	}

	// The root's lock for this driver comes first: a second nodevol-csi on
	// the root says who holds it, not that the HTTP port is in use.
	lock, err := d.LockRoot()
	if err != nil {
		fmt.Fprintln(stderr, "nodevol-csi:", err)
		return 1
	}
	defer lock.Release()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	if *secureAddr != "" {
		authRequests := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodevol", Subsystem: "csi",
			Name: kubeauth.RequestsMetric, Help: kubeauth.RequestsHelp}, []string{"result"})
		reg.MustRegister(authRequests)
		for _, r := range kubeauth.Results() {
			authRequests.WithLabelValues(string(r))
		}
		srv, err := httpserver.NewSecure(metrics, httpLimits, secure, httpserver.SecureMetrics{
			Count:  func(r kubeauth.Result) { authRequests.WithLabelValues(string(r)).Inc() },
			Logger: log.WithName("metrics-auth")})
		if err != nil {
			log.Error(err, "Setting up the secure metrics endpoint")
			return 1
		}
		lis, err := net.Listen("tcp", *secureAddr)
		if err != nil {
			log.Error(err, "Listening for HTTPS")
			return 1
		}
		go serveHTTP(srv, lis, log)
		defer srv.Close()
		metrics = nil
	}
	if *httpAddr != "" {
		lis, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			log.Error(err, "Listening for HTTP")
			return 1
		}
		srv := httpserver.New(httpHandler(d, metrics, *regDir != ""), httpLimits)
		go serveHTTP(srv, lis, log)
		defer srv.Close()
	}
	if err := d.Serve(ctx, driver.ServeOptions{Endpoint: *endpoint, KubeletEndpoint: *kubeletEndpoint, RegistrationDir: *regDir, RootLock: lock}); err != nil {
		log.Error(err, "Serving failed")
		return 1
	}
	return 0
}

// serveHTTP serves srv on lis, over TLS when srv has a TLS configuration.
func serveHTTP(srv *http.Server, lis net.Listener, log logr.Logger) {
	serve := srv.Serve
	if srv.TLSConfig != nil {
		serve = func(lis net.Listener) error { return srv.ServeTLS(lis, "", "") }
	}
	if err := serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(err, "Serving HTTP")
	}
}

// httpHandler serves the metrics (unless nil: they are served securely
// elsewhere), liveness (the process answers) and readiness (the kubelet
// has registered the driver, when it registers).
func httpHandler(d *driver.Driver, metrics http.Handler, registers bool) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if registers && !d.Registered() {
			http.Error(w, "not registered with the kubelet yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// memTotal is MemTotal from /proc/meminfo, in bytes.
func memTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo MemTotal %q: %w", rest, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/meminfo has no MemTotal")
}

// releaseVersion is the version a release stamps into the binary
// (hack/release, with -ldflags "-X main.releaseVersion=v1.2.3"); when set
// it takes the place of the build info's module version.
var releaseVersion string

// buildVersion is the module version (or releaseVersion) and VCS revision
// the binary was built from.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if releaseVersion != "" {
			return releaseVersion
		}
		return "unknown"
	}
	v := bi.Main.Version
	if releaseVersion != "" {
		v = releaseVersion
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v
}
