package cli

import (
	"context"
	"errors"
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

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

var foreignNS = mountdetect.MountNamespace{State: mountdetect.MountNamespaceForeign, By: mountdetect.EvidenceInitialInode}

func TestCheckRootVisibility(t *testing.T) {
	errNoRoot := errors.New("no such root")
	for _, tc := range []struct {
		name    string
		ns      mountdetect.MountNamespace
		prop    mountdetect.Propagation
		err     error
		visible bool
		why     string
	}{
		{"host", mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost, By: mountdetect.EvidencePID1}, mountdetect.Propagation{}, errNoRoot, true, "the host's mount namespace"},
		{"slave", foreignNS, mountdetect.Propagation{Master: 3, MountPoint: "/host/var/lib/kubelet"}, nil, true, "receives the host's mounts (slave (master:3) at /host/var/lib/kubelet"},
		{"shared", foreignNS, mountdetect.Propagation{PeerGroup: 2, MountPoint: "/host"}, nil, true, "receives the host's mounts (shared:2 at /host"},
		{"private", foreignNS, mountdetect.Propagation{MountPoint: "/host/var/lib/kubelet"}, nil, false, "on a private mount (at /host/var/lib/kubelet): a mount the host makes under it after this process started is not seen here; give the hostPath mountPropagation: HostToContainer"},
		{"unknown namespace, private", mountdetect.MountNamespace{State: mountdetect.MountNamespaceUnknown}, mountdetect.Propagation{MountPoint: "/"}, nil, false, "is on a private mount"},
		{"error", foreignNS, mountdetect.Propagation{}, errNoRoot, false, "cannot be told: no such root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := checkRootVisibility(tc.ns, "/host/var/lib/kubelet", func(string) (mountdetect.Propagation, error) { return tc.prop, tc.err })
			if v.visible != tc.visible || !strings.Contains(v.why, tc.why) {
				t.Errorf("checkRootVisibility = %v, %q; want %v, containing %q", v.visible, v.why, tc.visible, tc.why)
			}
			if (v.err != nil) != (tc.err != nil && tc.ns.State != mountdetect.MountNamespaceHost) {
				t.Errorf("err = %v; want it set only when the propagation was asked for and failed", v.err)
			}
		})
	}
}

// hostAndContainerView is a kubelet root as a DaemonSet's container sees
// it: the "host" root sits on a shared mount, and the container's view is
// a bind of it at another path, made a slave (mountPropagation
// HostToContainer) or private (None). The volume's NAS directory is
// returned by its host path.
func hostAndContainerView(t *testing.T, propagation uintptr) (hostRoot, containerRoot, hostNAS string) {
	t.Helper()
	dir := realTempDir(t)
	host := filepath.Join(dir, "host")
	mounttest.Tmpfs(t, host, "size=4m")
	if err := unix.Mount("", host, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	k := newKubelet(t, host)
	cache := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
	hostNAS = filepath.Join(cache, "nas")
	if err := os.Mkdir(hostNAS, 0o755); err != nil {
		t.Fatal(err)
	}
	view := filepath.Join(dir, "container")
	mounttest.Bind(t, host, view)
	if err := unix.Mount("", view, "", propagation, ""); err != nil {
		t.Fatal(err)
	}
	return k.root, filepath.Join(view, "kubelet"), hostNAS
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

// A Memory emptyDir the kubelet sets up after the agent's container
// started: in the agent's mount namespace its tmpfs is a propagated copy,
// the same superblock under another mount ID than the one SetUp recorded
// in the kubelet's. The agent's scan (from a namespace that is not the
// host's) knows it for the volume's own mount, in use, as a scan in the
// kubelet's namespace does; proven by mount ID alone it would be a foreign
// mount, a danger that is not there.
func TestScanFromContainerKnowsMemoryVolumes(t *testing.T) {
	mounttest.RequireMounts(t)
	hostRoot, containerRoot, _ := hostAndContainerView(t, unix.MS_SLAVE)
	layout, err := volume.NewLayout(hostRoot)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{root: hostRoot, layout: layout, plugin: emptydir.New(volume.NewHost(layout, nil, 1<<30))}
	mem := k.setUp(t, testUID2, "mem", volume.EmptyDirSource{Medium: volume.StorageMediumMemory, SizeLimit: 1 << 20})
	inContainer := filepath.Join(containerRoot, strings.TrimPrefix(mem, hostRoot))
	if ok, _, err := mountdetect.IsMountPoint(inContainer); err != nil || !ok {
		t.Fatalf("the Memory volume's tmpfs did not propagate to the container's view: IsMountPoint = %v, %v", ok, err)
	}
	// The agent's namespace: a private copy of this one, without the
	// host's view (a container has only its hostPath).
	agent := mounttest.StartPrivateNamespace(t)
	var fromHost, fromContainer *scanReport
	var errs [3]error
	agent.Do(func() {
		errs[0] = unix.Unmount(mem, 0)
		fromHost, errs[1] = scanRoot(containerRoot)
		fromContainer, errs[2] = scanRootWithin(containerRoot, volume.DefaultScanLimits(), scanOptionsFrom(foreignNS)...)
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	verdict := func(rep *scanReport) (scanVerdict, reasonCode) {
		for _, v := range rep.volumes {
			if v.Volume == "mem" {
				return v.Verdict, v.ReasonCode
			}
		}
		t.Fatalf("no volume mem in the scan: %+v", rep.volumes)
		return 0, 0
	}
	if v, c := verdict(fromContainer); v != verdictInUse || c != reasonOwnMount {
		t.Errorf("the agent's scan: %s (%s); want in-use (own-mount): the volume's own tmpfs, seen through propagation, is no danger", v, c)
	}
	if v, c := verdict(fromHost); v != verdictDanger || c != reasonForeignMount {
		t.Errorf("the same scan proving mounts by mount ID: %s (%s); want danger (foreign-mount), or this test shows nothing", v, c)
	}
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
