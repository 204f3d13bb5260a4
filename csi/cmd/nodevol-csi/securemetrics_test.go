package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeReviews answers TokenReviews (the token "good" is user prom, "other"
// is user other, the rest unknown) and SubjectAccessReviews (prom may get
// /metrics), as the API server's two endpoints do.
func fakeReviews(w http.ResponseWriter, r *http.Request) {
	var obj map[string]any
	if err := json.NewDecoder(r.Body).Decode(&obj); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spec, _ := obj["spec"].(map[string]any)
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		users := map[string]string{"good": "prom", "other": "other"}
		if u, ok := users[spec["token"].(string)]; ok {
			obj["status"] = map[string]any{"authenticated": true, "user": map[string]any{"username": u}}
		} else {
			obj["status"] = map[string]any{"authenticated": false, "error": "invalid token"}
		}
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		nr, _ := spec["nonResourceAttributes"].(map[string]any)
		obj["status"] = map[string]any{"allowed": spec["user"] == "prom" && nr["path"] == "/metrics" && nr["verb"] == "get"}
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(obj)
}

// TestSecureMetrics: with --secure-metrics-address, /metrics is served
// there over TLS to the clients the API server authorises only, and no
// longer on --http-address, which keeps /healthz and /readyz.
func TestSecureMetrics(t *testing.T) {
	api := httptest.NewTLSServer(http.HandlerFunc(fakeReviews))
	defer api.Close()
	dir := t.TempDir()
	ca, token := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("driver-token"), 0o600); err != nil {
		t.Fatal(err)
	}
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
			"--secure-metrics-address", secureAddr, "--kube-api-server", api.URL, "--kube-token-file", token, "--kube-ca-file", ca}, io.Discard, &stderr)
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
