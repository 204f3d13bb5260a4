package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodevol/nodevol/csi/driver"
	"github.com/nodevol/nodevol/internal/testsupport/slowclient"
)

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "nodevol-csi ") {
		t.Errorf("--version: %d, %q", code, out.String())
	}
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"extra"},
		{"--node-id", "", "--registration-dir", ""},                                         // no node ID
		{"--node-id", "n", "--kubelet-root", "var/lib/kubelet"},                             // relative root
		{"--node-id", "n", "--secure-metrics-address", ":0", "--tls-cert-file", "/tls.crt"}, // no key
		{"--node-id", "n", "--kube-api-server", "https://10.0.0.1:443"},                     // no --secure-metrics-address
	} {
		errb.Reset()
		if code := run(context.Background(), args, io.Discard, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and a message", args, code, errb.String())
		}
	}
}

// TestServe runs the command as the DaemonSet does and plays the kubelet:
// it finds the registration socket, asks GetInfo, reports the
// registration, and then the driver is ready; a cancelled context stops it
// cleanly and removes both sockets.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "kubelet")
	regDir := filepath.Join(dir, "registry")
	sock := filepath.Join(dir, "csi.sock")
	for _, d := range []string{root, regDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--endpoint", sock, "--registration-dir", regDir, "--kubelet-root", root,
			"--node-id", "node-1", "--http-address", addr, "--state-dir", dir, "--memory-bytes", "0"}, io.Discard, &stderr)
	}()
	regSock := filepath.Join(regDir, driver.DefaultName+"-reg.sock")
	waitFor(t, func() bool { _, err := os.Stat(regSock); return err == nil }, "the registration socket")

	conn, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	// The socket's file appears at bind(2), a moment before listen(2):
	// wait for it to answer, as the kubelet does (its dial blocks).
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	wantEndpoint := filepath.Join(root, "plugins", driver.DefaultName, "csi.sock")
	if info.GetType() != registerapi.CSIPlugin || info.GetName() != driver.DefaultName || info.GetEndpoint() != wantEndpoint || len(info.GetSupportedVersions()) == 0 {
		t.Fatalf("GetInfo = %v; want a CSI plugin %s at %s", info, driver.DefaultName, wantEndpoint)
	}
	if code := get(t, "http://"+addr+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the registration = %d; want 503", code)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if code := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the registration = %d; want 200", code)
	}

	csiConn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer csiConn.Close()
	if _, err := csi.NewIdentityClient(csiConn).Probe(ctx, &csi.ProbeRequest{}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `nodevol_csi_calls_total{code="OK",driver="`+driver.DefaultName+`",method="Probe"} 1`) {
		t.Errorf("/metrics does not count the Probe:\n%s", body)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run = %d after the context ended; want 0\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
	for _, p := range []string{sock, regSock} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}

// TestHTTPLimits: nodevol-csi's HTTP server (--http-address, without
// authentication) has serve's limits (package httpserver): with them
// shortened here, it closes a keep-alive connection left idle after one
// request and a request whose body comes a byte at a time, and refuses a
// header over its limit. Without them each such connection would be held
// for ever, with a goroutine, buffers and a descriptor.
func TestHTTPLimits(t *testing.T) {
	saved := httpLimits
	t.Cleanup(func() { httpLimits = saved })
	httpLimits.IdleTimeout = 200 * time.Millisecond
	httpLimits.ReadTimeout = 300 * time.Millisecond
	addr := startHTTP(t)
	const wait = 5 * time.Second // far above the limits: a loaded machine is slow
	if err := slowclient.Idle(addr, "/metrics", wait); err != nil {
		t.Errorf("an idle keep-alive connection (idle timeout %v): %v", httpLimits.IdleTimeout, err)
	}
	if err := slowclient.SlowBody(addr, "/healthz", 50*time.Millisecond, wait); err != nil {
		t.Errorf("a request whose body comes a byte every 50ms (read timeout %v): %v", httpLimits.ReadTimeout, err)
	}
	if err := slowclient.LargeHeader(addr, "/healthz", 200<<10); err != nil {
		t.Error(err)
	}
}

// startHTTP runs the command without registration on a temporary root
// until the test ends and returns its HTTP address once /healthz answers.
func startHTTP(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--endpoint", filepath.Join(dir, "csi.sock"), "--registration-dir", "", "--kubelet-root", dir,
			"--node-id", "node-1", "--http-address", addr, "--state-dir", dir, "--memory-bytes", "0"}, io.Discard, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("run = %d after the context ended; want 0\n%s", code, stderr.String())
		}
	})
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, "/healthz")
	return addr
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for range 500 {
		if ok() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
