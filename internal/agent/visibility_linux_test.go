//go:build linux

package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodevol/nodevol/internal/cli"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

var foreignNS = mountdetect.MountNamespace{State: mountdetect.MountNamespaceForeign, By: mountdetect.EvidenceInitialInode}

// hostAndContainerView is a kubelet root as a DaemonSet's container sees
// it (mounttest.HostAndView), with a Default emptyDir whose NAS directory
// is returned by its host path.
func hostAndContainerView(t *testing.T, propagation uintptr) (hostRoot, containerRoot, hostNAS string) {
	t.Helper()
	host, view := mounttest.HostAndView(t, mounttest.RealTempDir(t), propagation)
	hostRoot = filepath.Join(host, "kubelet")
	hostNAS = filepath.Join(setUpEmptyDir(t, hostRoot, "cache"), "nas")
	if err := os.Mkdir(hostNAS, 0o755); err != nil {
		t.Fatal(err)
	}
	return hostRoot, filepath.Join(view, "kubelet"), hostNAS
}

// A DaemonSet-like agent, not in the host's mount namespace, whose root is
// a slave of the host's: it says it sees the host's mounts, and a NAS the
// host mounts into a running pod's emptyDir after it started shows as
// danger, under the host's path, and goes when unmounted.
func TestServeThroughHostToContainer(t *testing.T) {
	mounttest.RequireMounts(t)
	hostRoot, containerRoot, nas := hostAndContainerView(t, unix.MS_SLAVE)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := startServerWith(t, serveOptions{root: containerRoot, hostRoot: hostRoot, ns: foreignNS},
		watchMountTable(ctx, ktesting.NewLogger(t, ktesting.NewConfig())))
	ts.waitScan(t)
	_, body := ts.get(t, "/metrics")
	if got := metric(body, "nodevol_host_mounts_visible{root=\""+hostRoot+"\"}"); got != "1" {
		t.Errorf("nodevol_host_mounts_visible = %q; want 1\n%s", got, body)
	}
	danger := `nodevol_scan_danger_volumes{root="` + hostRoot + `"}`
	mounttest.Tmpfs(t, nas, "size=1m") // on the host's side
	// Through the propagation, not only through the scan's matching of
	// mounts by where they lie: the NAS is a mount point in the view.
	inView := filepath.Join(containerRoot, strings.TrimPrefix(nas, hostRoot))
	if ok, _, err := mountdetect.IsMountPoint(inView); err != nil || !ok {
		t.Fatalf("the NAS did not propagate to the container's view %s: IsMountPoint = %v, %v", inView, ok, err)
	}
	ts.waitMetric(t, danger, "1")
	mounttest.Unmount(t, nas)
	ts.waitMetric(t, danger, "0")
}

// The same agent with a private root (mountPropagation None): it says it
// cannot see what the host mounts later, in the metric and in a warning
// that tells what to change. (That it does not is the kernel's: here the
// host's mount would still be in the agent's table, which one namespace
// shares; the end-to-end test runs the agent in a real container.)
func TestServeWithPrivateRootWarns(t *testing.T) {
	mounttest.RequireMounts(t)
	hostRoot, containerRoot, _ := hostAndContainerView(t, unix.MS_PRIVATE)
	var log lockedBuilder
	ts := startServerWith(t, serveOptions{root: containerRoot, hostRoot: hostRoot, ns: foreignNS, logger: textLogger(&log)}, nil)
	ts.waitScan(t)
	_, body := ts.get(t, "/metrics")
	if got := metric(body, "nodevol_host_mounts_visible{root=\""+hostRoot+"\"}"); got != "0" {
		t.Errorf("nodevol_host_mounts_visible = %q; want 0", got)
	}
	ts.cancel()
	<-ts.stopped
	ts.stopped <- nil
	if !strings.Contains(log.String(), "WARNING: mounts made on the host under the kubelet root may not be seen here") ||
		!strings.Contains(log.String(), "mountPropagation: HostToContainer") {
		t.Errorf("the log does not warn that the host's mounts are not seen, nor say what to change:\n%s", log.String())
	}
}

// lockedBuilder is a strings.Builder the server's goroutines may log to
// while the test reads it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// textLogger logs as serve does (klog's text format) to w.
func textLogger(w io.Writer) logr.Logger {
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(w)))
}

// A scan a bound stopped: the agent exports it as incomplete, with the
// pods over budget and the danger it found before and after the hostile
// pod, so that the recommended alert (danger or incomplete) fires.
func TestServeIncompleteScan(t *testing.T) {
	mounttest.RequireMounts(t)
	root, nas := kubeletWithNASDir(t)
	mounttest.Tmpfs(t, nas, "size=1m")
	flood := filepath.Join(root, "pods", "c0ffee00-1d4e-4b7a-9c21-6e5d2f1a7b90", "volumes", "kubernetes.io~secret")
	if err := os.MkdirAll(flood, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := os.Mkdir(filepath.Join(flood, fmt.Sprintf("s%03d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	limits := volume.ScanLimits{Node: 1 << 16, PodsDir: 1 << 13, Pod: 50, Dir: 1 << 10}
	ts := startServerWith(t, serveOptions{root: root, hostRoot: "/var/lib/kubelet",
		ns:   mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost},
		scan: func(root string) (*cli.ScanReport, error) { return cli.ScanRootWithin(root, limits) }}, nil)
	ts.waitScan(t)
	_, body := ts.get(t, "/metrics")
	for series, want := range map[string]string{
		`nodevol_scan_danger_volumes{root="/var/lib/kubelet"}`:                                 "1",
		`nodevol_scan_incomplete{root="/var/lib/kubelet"}`:                                     "1",
		`nodevol_scan_pods_over_budget{root="/var/lib/kubelet"}`:                               "1",
		`nodevol_scan_nested_mounts{plugin="kubernetes.io/empty-dir",root="/var/lib/kubelet"}`: "1",
	} {
		if got := metric(body, series); got != want {
			t.Errorf("/metrics: %s = %q; want %q\n%s", series, got, want, body)
		}
	}
	if got := metric(body, `nodevol_scan_problems{root="/var/lib/kubelet"}`); got == "0" || got == "" {
		t.Errorf("/metrics: nodevol_scan_problems = %q; want the over-budget pod's problems counted", got)
	}
}
