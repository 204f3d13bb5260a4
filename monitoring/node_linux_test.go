package monitoring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// The agent and the driver, as built from this repository.
var (
	buildOnce sync.Once
	bins      struct {
		nodevol, csi string
		err          error
	}
)

// binaries builds nodevol and beside it nodevol-agent, which "nodevol
// serve" runs (in the root module), and nodevol-csi (in csi/, with its own
// go.mod, as its image is built) once per test binary.
func binaries(t *testing.T) (nodevol, nodevolCSI string) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodevol-monitoring-bin-")
		if err != nil {
			bins.err = err
			return
		}
		bins.nodevol, bins.csi = filepath.Join(dir, "nodevol"), filepath.Join(dir, "nodevol-csi")
		for _, b := range []struct{ moduleDir, pkg, out string }{
			{"..", "./cmd/nodevol", bins.nodevol},
			{"..", "./cmd/nodevol-agent", filepath.Join(dir, "nodevol-agent")},
			{"../csi", "./cmd/nodevol-csi", bins.csi},
		} {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Dir = b.moduleDir
			if out, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s in %s: %w\n%s", b.pkg, b.moduleDir, err, out)
				return
			}
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.nodevol, bins.csi
}

// freeAddr is a loopback address nothing listens on (for the program to
// listen on next).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// process is a running program with an HTTP endpoint.
type process struct {
	cmd  *exec.Cmd
	addr string
	done chan error
}

// start runs bin with args; it is killed (and waited for) when the test
// ends. Its output goes to the test's log on failure.
func start(t *testing.T, addr, bin string, args ...string) *process {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(bin)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, addr: addr, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("%s %v:\n%s", bin, args, b)
			}
		}
		_ = log.Close()
	})
	return p
}

// get is the body of a GET of path, and its status.
func (p *process) get(path string) (int, []byte, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitFor polls path until it answers want.
func (p *process) waitFor(t *testing.T, path string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := p.get(path)
		if err == nil && code == want {
			return
		}
		select {
		case err := <-p.done:
			t.Fatalf("%s exited: %v", p.cmd.Path, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%s: %d %q %v; want %d", p.addr, path, code, body, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podUID is the test pods' UID.
const podUID = "6f1c0b2e-5d4a-4c3b-9a8e-7f6d5c4b3a21"

// node is a kubelet root as the host sees it (on a shared tmpfs) and as the
// agent's DaemonSet container sees it (a bind of it, a slave when the
// hostPath has mountPropagation HostToContainer), with a pod holding a
// Default emptyDir "cache".
type node struct {
	name       string
	hostRoot   string // the kubelet root, as the host names it
	viewRoot   string // the agent's view of it
	emptyDir   string // the pod's emptyDir, on the host
	podVolumes string // the pod's volumes/, on the host
}

// newNode makes the node; propagation is the view's (unix.MS_SLAVE: what
// HostToContainer gives; unix.MS_PRIVATE: what None gives).
func newNode(t *testing.T, name string, propagation uintptr) *node {
	t.Helper()
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	mounttest.Tmpfs(t, host, "size=16m")
	if err := unix.Mount("", host, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, hostRoot: filepath.Join(host, "kubelet")}
	n.podVolumes = filepath.Join(n.hostRoot, "pods", podUID, "volumes")
	n.emptyDir = filepath.Join(n.podVolumes, "kubernetes.io~empty-dir", "cache")
	if err := os.MkdirAll(n.emptyDir, 0o750); err != nil {
		t.Fatal(err)
	}
	view := filepath.Join(dir, "container")
	mounttest.Bind(t, host, view)
	if err := unix.Mount("", view, "", propagation, ""); err != nil {
		t.Fatal(err)
	}
	n.viewRoot = filepath.Join(view, "kubelet")
	return n
}

// agent starts nodevol serve on the node as the DaemonSet runs it, with
// the given scan interval, and waits for its first scan. Without
// --secure-metrics-listen (the chart's metrics.secure.enabled: false):
// the series the alerts read are the same on either port, and who may
// read the secure one is kubelet/hack/internal/harness's
// TestSecureMetricsAgainstAPIServer's concern, which needs an API server.
func (n *node) agent(t *testing.T, interval string) *process {
	t.Helper()
	nodevol, _ := binaries(t)
	addr := freeAddr(t)
	p := start(t, addr, nodevol, "serve", "--root="+n.viewRoot, "--host-root="+n.hostRoot, "--interval="+interval, "--listen="+addr)
	p.waitFor(t, "/readyz", http.StatusOK)
	return p
}

// csiDriver is a running nodevol-csi and a client of its CSI socket.
type csiDriver struct {
	*process
	node   csi.NodeClient
	target string
}

// driver starts nodevol-csi on the node as the DaemonSet runs it (but
// without registering with a kubelet) and publishes an inline volume
// "scratch" of the pod, as the kubelet would.
func (n *node) driver(t *testing.T) *csiDriver {
	t.Helper()
	_, bin := binaries(t)
	addr := freeAddr(t)
	state := t.TempDir()
	sock := filepath.Join(state, "csi.sock")
	p := start(t, addr, bin, "--driver-name=emptydir.nodevol.github.io", "--endpoint="+sock, "--kubelet-endpoint="+sock,
		"--registration-dir=", "--kubelet-root="+n.hostRoot, "--node-id="+n.name, "--http-address="+addr,
		"--quotas=false", "--state-dir="+state, "--memory-bytes=-1")
	p.waitFor(t, "/healthz", http.StatusOK)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	d := &csiDriver{process: p, node: csi.NewNodeClient(conn)}
	parent := filepath.Join(n.podVolumes, "kubernetes.io~csi", "scratch")
	if err := os.MkdirAll(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "vol_data.json"), []byte(`{"driverName":"emptydir.nodevol.github.io"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d.target = filepath.Join(parent, "mount")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err = d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: "csi-scratch", TargetPath: d.target,
			VolumeCapability: &csi.VolumeCapability{
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
				AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			},
			VolumeContext: map[string]string{
				"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.uid": podUID,
				"csi.storage.k8s.io/pod.name": "app", "csi.storage.k8s.io/pod.namespace": "default",
			},
		})
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // the socket is not there yet
	}
	if err != nil {
		t.Fatalf("NodePublishVolume %s: %v", d.target, err)
	}
	return d
}

// unpublish asks the driver to tear the volume down, as the kubelet does
// when the pod goes: nil, or the driver's refusal.
func (d *csiDriver) unpublish() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-scratch", TargetPath: d.target})
	return err
}

// errRefused is matched by the refusals the driver answers.
var errRefused = errors.New("refused")

// refusal is err when it is the driver's refusal (FAILED_PRECONDITION),
// wrapped in errRefused.
func refusal(err error) error {
	if status.Code(err) == codes.FailedPrecondition {
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	return err
}
