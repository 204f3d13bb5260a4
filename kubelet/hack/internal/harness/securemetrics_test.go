package harness

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodevol/nodevol/internal/agent"
)

// apiserverEnv names the kube-apiserver binary the test runs
// (kubelet/hack/build.sh --apiserver builds it; CI sets it).
const apiserverEnv = "NODEVOL_KUBE_APISERVER"

// secureMetricsChildEnv marks the test's own re-execution in fresh
// namespaces; the child also checks that it is PID 1 of one.
const secureMetricsChildEnv = "NODEVOL_SECURE_METRICS_CHILD"

// TestSecureMetricsAgainstAPIServer runs nodevol serve with
// --secure-metrics-listen against a real kube-apiserver (and etcd), with
// deploy/secure-metrics/'s RBAC applied: a scrape with the token of the
// ServiceAccount that RBAC lets get /metrics succeeds; one with another
// ServiceAccount's token gets 403; none, a made-up token, the scraper's
// claims expired (signed with the API server's own key) or signed with
// another key get 401;
// /healthz stays plain HTTP on --listen, which no longer serves /metrics.
// The control plane runs in private network, mount and PID namespaces, so
// its fixed ports and processes never reach the host.
func TestSecureMetricsAgainstAPIServer(t *testing.T) {
	if os.Getenv(secureMetricsChildEnv) == "" {
		runSecureMetricsChild(t)
		return
	}
	if os.Getpid() != 1 {
		t.Fatalf("%s is set but this is pid %d, not PID 1 of a new namespace: refusing to start a control plane on the host", secureMetricsChildEnv, os.Getpid())
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := loopbackUp(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp, err := startControlPlane(ctx, dir, os.Getenv(apiserverEnv), newLogger(os.Stderr, time.Now(), "control plane: "))
	if err != nil {
		t.Fatal(err)
	}
	defer cp.stop()

	// The RBAC as deploy/ ships it, and the accounts it names.
	files, err := filepath.Glob("../../../../deploy/secure-metrics/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/secure-metrics: %v, %d files", err, len(files))
	}
	docs, err := readManifestDocs(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		path, err := d.collectionPath()
		if err == nil {
			err = cp.do(ctx, http.MethodPost, path, d.Object, nil)
		}
		if err != nil {
			t.Fatalf("creating %s %s (%s): %v", d.Kind, d.Name, d.Src, err)
		}
	}
	token := func(ns, name string) string {
		t.Helper()
		for _, obj := range []any{
			&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		} {
			path := "/api/v1/namespaces"
			if _, ok := obj.(*corev1.ServiceAccount); ok {
				path += "/" + ns + "/serviceaccounts"
			}
			if err := cp.do(ctx, http.MethodPost, path, obj, nil); err != nil && !strings.Contains(err.Error(), "already exists") {
				t.Fatal(err)
			}
		}
		req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}}
		var tr struct {
			Status struct {
				Token string `json:"token"`
			} `json:"status"`
		}
		if err := cp.do(ctx, http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts/"+name+"/token", req, &tr); err != nil || tr.Status.Token == "" {
			t.Fatalf("a token of %s/%s: %v", ns, name, err)
		}
		return tr.Status.Token
	}
	agentToken := token("nodevol-system", "nodevol")
	scraper := token("monitoring", "prometheus-k8s")
	intruder := token("monitoring", "intruder")
	tokenFile := filepath.Join(dir, "agent-token")
	if err := os.WriteFile(tokenFile, []byte(agentToken), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(filepath.Join(root, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- agent.Main([]string{"--root", root, "--listen", "127.0.0.1:9477",
			"--secure-metrics-listen", "127.0.0.1:9478",
			"--kube-api-server", fmt.Sprintf("https://127.0.0.1:%d", apiserverPort),
			"--kube-token-file", tokenFile, "--kube-ca-file", cp.pki.path(caCertFile)}, io.Discard, stderr)
	}()

	// The agent's serving certificate is self-signed: the scraper checks
	// who it talks to by other means (here: nothing but loopback).
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b), err
	}
	// Tokens made from the scraper's: its claims signed again with the
	// API server's own service-account key (unchanged: accepted, which
	// shows the re-signing is sound; expired an hour ago: refused), and
	// with another key (a forgery: refused).
	saKey, err := readECKey(cp.pki.path(saPrivateFile))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	resigned, err := resignJWT(scraper, saKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := resignJWT(scraper, saKey, func(c map[string]any) {
		past := time.Now().Add(-time.Hour).Unix()
		c["exp"], c["iat"], c["nbf"] = past, past-600, past-600
	})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := resignJWT(scraper, otherKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	const metricsURL = "https://127.0.0.1:9478/metrics"
	err = poll(ctx, 30*time.Second, func() (bool, error) {
		select {
		case code := <-exited:
			return false, fmt.Errorf("nodevol serve exited with %d: %s", code, stderr.String())
		default:
		}
		_, _, err := get(metricsURL, "")
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"the scraper RBAC names", scraper, http.StatusOK},
		{"another ServiceAccount", intruder, http.StatusForbidden},
		{"no token", "", http.StatusUnauthorized},
		{"a made-up token", "not-a-token", http.StatusUnauthorized},
		{"the scraper's token with a byte changed", scraper[:len(scraper)-2] + "xx", http.StatusUnauthorized},
		{"the scraper's claims signed again with the API server's key", resigned, http.StatusOK},
		{"the scraper's claims, expired an hour ago, signed with the API server's key", expired, http.StatusUnauthorized},
		{"the scraper's claims signed with another key", forged, http.StatusUnauthorized},
		{"the scraper again (cached)", scraper, http.StatusOK},
	} {
		code, body, err := get(metricsURL, c.token)
		switch {
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case code != c.want:
			t.Errorf("%s: %d %q; want %d", c.name, code, body, c.want)
		case code == http.StatusOK && !strings.Contains(body, "nodevol_build_info"):
			t.Errorf("%s: 200 without the metrics: %q", c.name, body)
		case code != http.StatusOK && len(body) > 64:
			t.Errorf("%s: %d with a %d-byte body; want a short one", c.name, code, len(body))
		default:
			t.Logf("%s: %d %q", c.name, code, firstLine(body))
		}
	}
	// The refusals are counted, for the authorised scraper to see (the
	// wait for the server above made unauthenticated requests too).
	_, body, err := get(metricsURL, scraper)
	counted := grepLines(body, "nodevol_metrics_auth_requests_total{")
	if err != nil || !strings.Contains(counted, `{result="forbidden"} 1`) || !strings.Contains(counted, `{result="unavailable"} 0`) ||
		strings.Contains(counted, `{result="unauthenticated"} 0`) || strings.Contains(counted, `{result="unauthenticated"} 1`) || strings.Contains(counted, `{result="unauthenticated"} 2`) {
		t.Errorf("the refusals are not counted as they happened: %v\n%s", err, counted)
	}
	// The kubelet's probes: plain HTTP, no token; /metrics is not there.
	plain := &http.Client{Timeout: 5 * time.Second}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/metrics": http.StatusNotFound} {
		resp, err := plain.Get("http://127.0.0.1:9477" + path)
		if err != nil {
			t.Errorf("plain %s: %v", path, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("plain %s: %d; want %d", path, resp.StatusCode, want)
		}
	}
	// Plain HTTP on the secure port is not answered with metrics.
	if resp, err := plain.Get("http://127.0.0.1:9478/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP on the secure port got 200")
		}
	}
	// The API server gone: refused with 503, never let through (the
	// allowed decision of a minute ago is still cached, so a token not
	// seen yet is asked about).
	cp.apiserver.kill()
	code, body, err := get(metricsURL, intruder+"x")
	if err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("a scrape while the API server is down: %d %q %v; want 503", code, body, err)
	}
	if t.Failed() {
		t.Logf("nodevol serve's log:\n%s", stderr.String())
	}
}

// runSecureMetricsChild runs the test again as PID 1 of new network,
// mount and PID namespaces; when it ends, the kernel ends every process
// it started.
func runSecureMetricsChild(t *testing.T) {
	bin := os.Getenv(apiserverEnv)
	switch {
	case os.Geteuid() != 0 && os.Getenv("CI") == "true":
		t.Fatal("needs root (network, mount and PID namespaces); under CI=true it cannot be skipped")
	case os.Geteuid() != 0:
		t.Skip("needs root (network, mount and PID namespaces)")
	case bin == "" && os.Getenv("CI") == "true":
		t.Fatalf("$%s is not set; under CI=true it cannot be skipped (kubelet/hack/build.sh OUT --apiserver builds it)", apiserverEnv)
	case bin == "":
		t.Skipf("$%s is not set (kubelet/hack/build.sh OUT --apiserver builds it)", apiserverEnv)
	}
	if _, err := os.Stat(etcdBinary); err != nil {
		t.Fatalf("etcd: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecureMetricsAgainstAPIServer$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), secureMetricsChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	t.Logf("in private namespaces:\n%s", out)
	if err != nil {
		t.Fatalf("the test in private namespaces: %v", err)
	}
}

// lockedBuffer is a buffer the serving goroutine writes and the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func grepLines(s, word string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// readECKey reads a PKCS #8 PEM ECDSA key, as pki writes them.
func readECKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an ECDSA key", path, k)
	}
	return ec, nil
}

// resignJWT is the ES256 JWT token with its header kept, its claims
// changed by edit (nil: none), signed with key.
func resignJWT(token string, key *ecdsa.PrivateKey, edit func(map[string]any)) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("not a JWT")
	}
	enc := base64.RawURLEncoding
	payload := parts[1]
	if edit != nil {
		raw, err := enc.DecodeString(parts[1])
		if err != nil {
			return "", err
		}
		claims := map[string]any{}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(&claims); err != nil {
			return "", err
		}
		edit(claims)
		b, err := json.Marshal(claims)
		if err != nil {
			return "", err
		}
		payload = enc.EncodeToString(b)
	}
	signed := parts[0] + "." + payload
	digest := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signed + "." + enc.EncodeToString(sig), nil
}
