package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/nodevol/nodevol/internal/base/promtext"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodevol/nodevol/internal/cli"
	"github.com/nodevol/nodevol/internal/testsupport/slowclient"
	"github.com/nodevol/nodevol/mountdetect"
)

// TestServeHTTPLimits: serve's HTTP server closes an idle keep-alive
// connection after serveHTTP.IdleTimeout, a request whose body trickles
// in after serveHTTP.ReadTimeout (both shortened here), and refuses a
// header over httpserver's limit. Without them (net/http has no idle
// timeout unless IdleTimeout or ReadTimeout is set, and reads headers of
// up to 1 MiB) anything that can reach the agent could hold connections
// open until it ran out of descriptors or memory.
func TestServeHTTPLimits(t *testing.T) {
	saved := serveHTTP
	t.Cleanup(func() { serveHTTP = saved })
	serveHTTP.IdleTimeout = 200 * time.Millisecond
	serveHTTP.ReadTimeout = 300 * time.Millisecond
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, root, nil)
	addr := strings.TrimPrefix(ts.url, "http://")

	t.Run("idle keep-alive connection", func(t *testing.T) {
		if err := slowclient.Idle(addr, "/healthz", 5*time.Second); err != nil {
			t.Errorf("an idle keep-alive connection (idle timeout %v): %v", serveHTTP.IdleTimeout, err)
		}
	})

	t.Run("slow body", func(t *testing.T) {
		if err := slowclient.SlowBody(addr, "/healthz", 50*time.Millisecond, 5*time.Second); err != nil {
			t.Errorf("a request whose body comes a byte every 50ms (read timeout %v): %v", serveHTTP.ReadTimeout, err)
		}
	})

	t.Run("large header", func(t *testing.T) {
		if err := slowclient.LargeHeader(addr, "/healthz", 200<<10); err != nil {
			t.Error(err)
		}
	})
}

// TestServeShutdownWithHungScan: a scan that never returns (a filesystem
// that stopped answering, which no code path can rule out for good) does
// not keep the agent from exiting: on cancellation run waits for the scan
// loop no longer than the grace period and returns. While the scan hangs,
// /metrics and /healthz answer, and /readyz fails once the last
// successful scan is older than 3 intervals.
func TestServeShutdownWithHungScan(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 10)
	scanned := make(chan struct{}, 10)
	scans := 0
	s, err := newServer(serveOptions{
		root: "/nonexistent", hostRoot: "/var/lib/kubelet", interval: 10 * time.Second,
		ns:    mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost},
		clock: clk, registry: promtext.NewRegistry(), logger: logr.Discard(), // the hung scan logs after the test
		scan: func(string) (*cli.ScanReport, error) {
			scans++
			started <- struct{}{}
			if scans > 1 {
				<-release // hangs until the test ends
			}
			return &cli.ScanReport{}, nil
		},
		scanned: func() { scanned <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.run(ctx, ln, time.Second) }()
	get := func(path string) int {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	<-scanned // the first scan, which returns (its success recorded)
	clk.Step(10 * time.Second)
	<-started // the first scan
	<-started // the second, at the tick, which hangs
	if code := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz right after a successful scan = %d; want 200", code)
	}
	clk.Step(25 * time.Second)
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with a scan hung for 3.5 intervals = %d; want 503", code)
	}
	for _, p := range []string{"/metrics", "/healthz"} {
		if code := get(p); code != http.StatusOK {
			t.Errorf("%s with a scan hung = %d; want 200", p, code)
		}
	}
	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("run = %v; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run has not returned 10s after its context was cancelled (grace 1s): shutdown waits for the hung scan")
	}
}

// TestServeLogBounded: whoever can write into a pod directory makes tens
// of thousands of entries that do not parse (up to the scan's bound), at
// every scan (every interval and every mount change). scanOnce logs each
// kind (unhealthy volumes, problems) for at most maxLoggedPerScan entries,
// then one line saying how many more there are (the metrics count them
// all), so the node's logs are not flooded.
func TestServeLogBounded(t *testing.T) {
	const n = 5000
	var vols []*cli.ScanVolume
	var problems []cli.ScanProblem
	for i := range n {
		problems = append(problems, cli.ScanProblem{Problem: fmt.Sprintf("/r/pods/x%d", i), Error: "bad"})
		vols = append(vols, &cli.ScanVolume{PodUID: testUID, Plugin: "kubernetes.io/secret", Volume: fmt.Sprintf("v%d", i), Path: fmt.Sprintf("/r/pods/%s/volumes/kubernetes.io~secret/v%d", testUID, i),
			Verdict: cli.VerdictDanger, ReasonCode: cli.ReasonNestedMount})
	}
	rep := cli.NewScanReport("/r", vols, problems)
	lines := 0
	logger := funcr.New(func(prefix, args string) { lines++ }, funcr.Options{})
	s, err := newServer(serveOptions{
		root: "/r", hostRoot: "/var/lib/kubelet", interval: 10 * time.Second,
		ns:    mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost},
		clock: clocktesting.NewFakeClock(time.Now()), registry: promtext.NewRegistry(), logger: logger,
		scan: func(string) (*cli.ScanReport, error) { return rep, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.scanOnce()
	if lines > 250 {
		t.Errorf("one scan with %d problems and %d volumes in danger logged %d lines; want a bound (a few hundred at most)", n, n, lines)
	}
	if lines < 100 {
		t.Errorf("one scan with %d problems and %d volumes in danger logged %d lines; want the first ones and a count of the rest", n, n, lines)
	}
}

// TestServeRescanStormRateLimited: a container that mounts and unmounts
// in a loop (any container with bidirectional propagation) changes the
// mount table all the time. A rescan waits the 100 ms debounce and also
// as long as the last scan a mount change asked for took, so mount
// changes keep the agent scanning at most half the time (a mount change
// at or above the pods directory makes serve scan the whole root, about
// 0.5 s of CPU at 10,000 volumes), not back to back at its CPU limit.
func TestServeRescanStormRateLimited(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	rescan := make(chan struct{}, 1)
	scans := make(chan struct{}, 100)
	s, err := newServer(serveOptions{
		root: "/r", hostRoot: "/var/lib/kubelet", interval: time.Hour, rescan: rescan,
		ns:    mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost},
		clock: clk, registry: promtext.NewRegistry(), logger: logr.Discard(),
		scan: func(string) (*cli.ScanReport, error) {
			clk.Step(2 * time.Second) // every scan takes 2s
			return &cli.ScanReport{}, nil
		},
		scanned: func() { scans <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.scanLoop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-scans // the first scan
	rescan <- struct{}{}
	// The first scan does not delay a mount change's: the rescan comes
	// at once (there is no debounce here).
	select {
	case <-scans:
	case <-time.After(5 * time.Second):
		t.Fatal("no rescan for a mount change after the first scan")
	}
	rescan <- struct{}{}
	// The loop now waits for the clock (a waiter beside the ticker), or
	// scans at once.
	deadline := time.Now().Add(5 * time.Second)
	for clk.Waiters() < 2 && len(scans) == 0 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	clk.Step(time.Second) // half the last scan's duration
	select {
	case <-scans:
		t.Fatalf("a mount change rescanned within 1s of a scan that took 2s: mount changes can keep the agent scanning all the time")
	case <-time.After(200 * time.Millisecond):
	}
	clk.Step(time.Second)
	select {
	case <-scans:
	case <-time.After(5 * time.Second):
		t.Fatal("no rescan 2s after a mount change")
	}
}
