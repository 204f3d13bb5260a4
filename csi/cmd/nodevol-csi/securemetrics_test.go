package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/testsupport/reviewapi"
)

// TestSecureMetrics: with --secure-metrics-address, /metrics is served
// there over TLS to the clients the API server authorises only, and no
// longer on --http-address, which keeps /healthz and /readyz.
func TestSecureMetrics(t *testing.T) {
	api := reviewapi.New(t)
	dir := t.TempDir()
	ca, token := api.Files(t)
	free := func() string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		return lis.Addr().String()
	}
	httpAddr, secureAddr := free(), free()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--endpoint", filepath.Join(dir, "csi.sock"), "--registration-dir", "", "--kubelet-root", dir,
			"--node-id", "node-1", "--http-address", httpAddr, "--state-dir", dir, "--memory-bytes", "0", "--quotas=false",
			"--secure-metrics-address", secureAddr, "--kube-api-server", api.URL(), "--kube-token-file", token, "--kube-ca-file", ca}, io.Discard, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("run did not stop")
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	do := func(c *http.Client, url, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, func() bool { code, _ := do(client, "https://"+secureAddr+"/metrics", ""); return code != 0 }, "the secure metrics endpoint")
	for _, c := range []struct {
		token string
		want  int
	}{{"good", 200}, {"other", 403}, {"", 401}, {"made-up", 401}} {
		if code, body := do(client, "https://"+secureAddr+"/metrics", c.token); code != c.want {
			t.Errorf("token %q: %d %q; want %d", c.token, code, body, c.want)
		}
	}
	if _, body := do(client, "https://"+secureAddr+"/metrics", "good"); !strings.Contains(body, `nodevol_csi_metrics_auth_requests_total{result="forbidden"} 1`) {
		t.Errorf("the refusal is not counted:\n%s", body)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if code, _ := do(plain, "http://"+httpAddr+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("plain /metrics: %d; want 404", code)
	}
	if code, _ := do(plain, "http://"+httpAddr+"/healthz", ""); code != http.StatusOK {
		t.Errorf("plain /healthz: %d; want 200", code)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr.String())
	}
}
