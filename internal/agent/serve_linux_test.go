package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/base/promtext"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodevol/nodevol/internal/cli"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
)

// testServer is a server started on 127.0.0.1:0 over a kubelet root, with
// a fake clock (the interval never elapses unless the test steps it) and
// a rescan channel the test fires instead of waiting for the interval.
type testServer struct {
	s       *server
	url     string
	clock   *clocktesting.FakeClock
	trigger chan struct{} // asks for a rescan, unless a watch was given
	scans   chan struct{} // one value per completed scan
	stopped chan error
	cancel  context.CancelFunc
}

func startServer(t *testing.T, root string, watch <-chan struct{}) *testServer {
	t.Helper()
	return startServerWith(t, serveOptions{root: root, hostRoot: "/var/lib/kubelet",
		ns: mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost}}, watch)
}

// startServerWith starts a server made of opts (root, hostRoot, ns and,
// when set, logger) and the test's clock, registry and hooks.
func startServerWith(t *testing.T, opts serveOptions, watch <-chan struct{}) *testServer {
	t.Helper()
	ts := &testServer{
		clock:   clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)),
		trigger: make(chan struct{}, 1),
		scans:   make(chan struct{}, 100),
		stopped: make(chan error, 1),
	}
	opts.rescan = watch
	if opts.rescan == nil {
		opts.rescan = ts.trigger
	}
	if opts.logger.GetSink() == nil {
		opts.logger = ktesting.NewLogger(t, ktesting.NewConfig())
	}
	opts.interval = 10 * time.Second
	opts.version = cli.VersionInfo{Version: "v1.2.3", GoVersion: "go1.99"}
	opts.clock, opts.registry = ts.clock, promtext.NewRegistry()
	opts.scanned = func() { ts.scans <- struct{}{} }
	s, err := newServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts.s = s
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() { ts.stopped <- s.run(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		<-ts.stopped
	})
	return ts
}

// get is the status and body of GET path.
func (ts *testServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(ts.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// waitScan waits for the next completed scan.
func (ts *testServer) waitScan(t *testing.T) {
	t.Helper()
	select {
	case <-ts.scans:
	case <-time.After(10 * time.Second):
		t.Fatal("no scan completed within 10s")
	}
}

// waitMetric polls /metrics until series has the value want, failing the
// test after 10 s.
func (ts *testServer) waitMetric(t *testing.T, series, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := ts.get(t, "/metrics")
		if metric(body, series) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become %q within 10s:\n%s", series, want, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric is the value of the sample named by series (name{labels} as the
// text format writes it), or "" when there is none.
func metric(body, series string) string {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	if m := re.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// kubeletWithNASDir sets up a Default emptyDir "cache" in a fresh kubelet
// root and makes the directory a "NAS" can be mounted on inside it.
func kubeletWithNASDir(t *testing.T) (root, nas string) {
	t.Helper()
	root = filepath.Join(mounttest.RealTempDir(t), "kubelet")
	nas = filepath.Join(setUpEmptyDir(t, root, "cache"), "nas")
	if err := os.Mkdir(nas, 0o755); err != nil {
		t.Fatal(err)
	}
	return root, nas
}

const dangerSeries = `nodevol_scan_volumes{plugin="kubernetes.io/empty-dir",reason="nested-mount",root="/var/lib/kubelet",verdict="danger"}`

func TestServe(t *testing.T) {
	mounttest.RequireMounts(t)
	root, nas := kubeletWithNASDir(t)
	before := mounttest.Snapshot(t, root)

	ts := startServer(t, root, nil)
	if code, _ := ts.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d; want 200", code)
	}
	ts.waitScan(t)
	if code, body := ts.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the first scan = %d %q; want 200", code, body)
	}
	_, body := ts.get(t, "/metrics")
	for series, want := range map[string]string{
		`nodevol_scan_danger_volumes{root="/var/lib/kubelet"}`:                                                             "0",
		`nodevol_scan_volumes{plugin="kubernetes.io/empty-dir",reason="not-mounted",root="/var/lib/kubelet",verdict="ok"}`: "1",
		`nodevol_scans_total{root="/var/lib/kubelet"}`:                                                                     "1",
		`nodevol_scan_errors_total{root="/var/lib/kubelet"}`:                                                               "0",
		`nodevol_build_info{goversion="go1.99",revision="",version="v1.2.3"}`:                                              "1",
		`nodevol_mount_namespace{state="host"}`:                                                                            "1",
		`nodevol_mount_namespace{state="foreign"}`:                                                                         "0",
		`nodevol_scan_duration_seconds_count{root="/var/lib/kubelet"}`:                                                     "1",
	} {
		if got := metric(body, series); got != want {
			t.Errorf("/metrics: %s = %q; want %q", series, got, want)
		}
	}
	// The Go runtime's and the process's standard metrics, which the
	// soak and footprint dashboards read (promtext's tests compare all of
	// them with client_golang's collectors).
	for _, series := range []string{"nodevol_last_scan_timestamp_seconds{root=\"/var/lib/kubelet\"}",
		"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total"} {
		if metric(body, series) == "" {
			t.Errorf("/metrics has no %s:\n%s", series, body)
		}
	}

	// A NAS in the Default emptyDir: one volume in danger after a rescan.
	mounttest.Tmpfs(t, nas, "size=1m")
	ts.trigger <- struct{}{}
	ts.waitScan(t)
	_, body = ts.get(t, "/metrics")
	if got := metric(body, dangerSeries); got != "1" {
		t.Errorf("/metrics with a tmpfs in the emptyDir: %s = %q; want 1\n%s", dangerSeries, got, body)
	}
	if got := metric(body, `nodevol_scan_danger_volumes{root="/var/lib/kubelet"}`); got != "1" {
		t.Errorf("nodevol_scan_danger_volumes = %q; want 1", got)
	}
	if got := metric(body, `nodevol_scan_nested_mounts{plugin="kubernetes.io/empty-dir",root="/var/lib/kubelet"}`); got != "1" {
		t.Errorf("nodevol_scan_nested_mounts = %q; want 1", got)
	}

	// Unmounted: no danger after the next scan.
	mounttest.Unmount(t, nas)
	ts.trigger <- struct{}{}
	ts.waitScan(t)
	_, body = ts.get(t, "/metrics")
	if got := metric(body, dangerSeries); got != "" {
		t.Errorf("/metrics after the unmount: %s = %q; want no such series", dangerSeries, got)
	}
	if got := metric(body, `nodevol_scan_danger_volumes{root="/var/lib/kubelet"}`); got != "0" {
		t.Errorf("nodevol_scan_danger_volumes after the unmount = %q; want 0", got)
	}

	// The interval, on the fake clock, scans too.
	ts.clock.Step(10 * time.Second)
	ts.waitScan(t)
	_, body = ts.get(t, "/metrics")
	if got := metric(body, `nodevol_scans_total{root="/var/lib/kubelet"}`); got != "4" {
		t.Errorf("nodevol_scans_total after 3 rescans = %q; want 4", got)
	}
	mounttest.Intact(t, root, before) // serve changes nothing

	// Graceful shutdown: run returns nil and the port is closed.
	ts.cancel()
	select {
	case err := <-ts.stopped:
		if err != nil {
			t.Errorf("run after cancel = %v; want nil", err)
		}
		ts.stopped <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of its context's end")
	}
	if _, err := http.Get(ts.url + "/healthz"); err == nil {
		t.Error("GET /healthz after shutdown succeeded; want the connection refused")
	}
}

// /readyz: not ready before the first scan, nor when the last scan
// failed, nor when the last success is older than 3 intervals.
func TestServeReadiness(t *testing.T) {
	root := filepath.Join(t.TempDir(), "kubelet")
	s, err := newServer(serveOptions{root: root, hostRoot: root, interval: 10 * time.Second,
		clock: clocktesting.NewFakeClock(time.Unix(1e9, 0))})
	if err != nil {
		t.Fatal(err)
	}
	fc := s.opts.clock.(*clocktesting.FakeClock)
	if err := s.ready(); err == nil || !strings.Contains(err.Error(), "no scan") {
		t.Errorf("ready() before any scan = %v; want no scan has completed", err)
	}
	s.scanOnce() // the root does not exist
	if err := s.ready(); err == nil || !strings.Contains(err.Error(), "last scan failed") {
		t.Errorf("ready() after a failed scan = %v; want last scan failed", err)
	}
	mounttest.Build(t, root, "dir pods")
	s.scanOnce()
	if err := s.ready(); err != nil {
		t.Errorf("ready() after a successful scan = %v; want nil", err)
	}
	fc.Step(30 * time.Second)
	if err := s.ready(); err != nil {
		t.Errorf("ready() 3 intervals after a successful scan = %v; want nil", err)
	}
	fc.Step(time.Millisecond)
	if err := s.ready(); err == nil || !strings.Contains(err.Error(), "old") {
		t.Errorf("ready() more than 3 intervals after = %v; want too old", err)
	}
}

// The mount table watch fires when something is mounted, and the server
// rescans without being asked and without the interval elapsing.
func TestServeRescansOnMountChange(t *testing.T) {
	mounttest.RequireMounts(t)
	root, nas := kubeletWithNASDir(t)
	// The watch opens the mount table of the thread it runs on; mount on
	// that same thread, so that a thread another test left in a namespace
	// of its own cannot split the two.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := startServer(t, root, watchMountTable(ctx, ktesting.NewLogger(t, ktesting.NewConfig())))
	ts.waitScan(t)
	mounttest.Tmpfs(t, nas, "size=1m")
	ts.waitMetric(t, dangerSeries, "1")
}

// watchMountTable reports every change, once: 50 mounts and 50 unmounts,
// each seen within 2 s, and nothing while the table is still. The HTTP
// traffic keeps the Go runtime's netpoller busy; a watch on a file opened
// with os.Open (in the runtime's epoll set) lost about one change in five
// to it.
func TestWatchMountTableSeesEveryChange(t *testing.T) {
	mounttest.RequireMounts(t)
	dir := t.TempDir()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := watchMountTable(ctx, ktesting.NewLogger(t, ktesting.NewConfig()))

	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	go func() {
		for ctx.Err() == nil {
			if resp, err := http.Get("http://" + ln.Addr().String()); err == nil {
				resp.Body.Close()
			}
		}
	}()

	expect := func(what string, want bool) {
		t.Helper()
		wait := 2 * time.Second
		if !want {
			wait = 700 * time.Millisecond // longer than one poll timeout
		}
		select {
		case <-watch:
			if !want {
				t.Fatalf("%s: the watch fired with no change", what)
			}
		case <-time.After(wait):
			if want {
				t.Fatalf("%s: the watch did not fire within %v", what, wait)
			}
		}
	}
	expect("before any change", false)
	for i := range 50 {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
		expect(fmt.Sprintf("mount %d", i), true)
		if err := unix.Unmount(dir, 0); err != nil {
			t.Fatal(err)
		}
		expect(fmt.Sprintf("unmount %d", i), true)
	}
	expect("after the last change", false)
}
