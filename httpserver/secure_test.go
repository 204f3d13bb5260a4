package httpserver

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodevol/nodevol/httpserver/kubeauth"
	"github.com/nodevol/nodevol/internal/testsupport/reviewapi"
	"github.com/nodevol/nodevol/internal/testsupport/slowclient"
)

// apiConfig is how a Client reaches the stand-in API server.
func apiConfig(t *testing.T, api *reviewapi.Server) kubeauth.Config {
	ca, token := api.Files(t)
	return kubeauth.Config{Server: api.URL(), CAFile: ca, TokenFile: token}
}

// serveSecure serves a NewSecure server of "metrics" with the limits l,
// reviewing with the stand-in, on a loopback port until the test ends.
func serveSecure(t *testing.T, api *reviewapi.Server, l Limits) string {
	t.Helper()
	srv, err := NewSecure(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "metrics") }), l,
		SecureOptions{API: apiConfig(t, api)}, SecureMetrics{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// insecureTLS trusts any certificate: the server's is self-signed, and
// what is tested is the server's refusals.
var insecureTLS = &tls.Config{InsecureSkipVerify: true}

// TestSecureRefusesAttackers: what a client on the pod network can send
// to the secure port, each refused, without a review where none is
// needed: a client certificate without a token, a header over
// MaxHeaderBytes, a large body without a token, another user's token, a
// made-up one, plain HTTP.
func TestSecureRefusesAttackers(t *testing.T) {
	api := reviewapi.New(t)
	addr := serveSecure(t, api, short)
	url := "https://" + addr + "/metrics"
	clientCert, err := SelfSignedCertificate([]string{"prometheus"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{clientCert}}}}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS}}
	do := func(c *http.Client, method, auth string, body io.Reader, header map[string]string) (int, error) {
		req, err := http.NewRequest(method, url, body)
		if err != nil {
			return 0, err
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, err
	}
	// A body of 64 MiB that counts what the server made the client send.
	var sent atomic.Int64
	large := &countingReader{r: io.LimitReader(zeros{}, 64<<20), n: &sent}
	for _, c := range []struct {
		name    string
		client  *http.Client
		method  string
		auth    string
		body    io.Reader
		header  map[string]string
		want    int
		reviews int32
	}{
		{"a client certificate, no token", withCert, http.MethodGet, "", nil, nil, http.StatusUnauthorized, 0},
		{"a client certificate and a made-up token", withCert, http.MethodGet, "Bearer made-up", nil, nil, http.StatusUnauthorized, 1},
		{"a header of 64 KiB", client, http.MethodGet, "Bearer good", nil, map[string]string{"X-Junk": strings.Repeat("a", 64<<10)}, http.StatusRequestHeaderFieldsTooLarge, 0},
		{"a token of 64 KiB", client, http.MethodGet, "Bearer " + strings.Repeat("g", 64<<10), nil, nil, http.StatusRequestHeaderFieldsTooLarge, 0},
		{"a body of 64 MiB, no token", client, http.MethodPost, "", large, nil, http.StatusUnauthorized, 0},
		{"another user's token", client, http.MethodGet, "Bearer other", nil, nil, http.StatusForbidden, 2},
		{"the scraper's token, POST", client, http.MethodPost, "Bearer good", strings.NewReader("x"), nil, http.StatusForbidden, 2},
		{"the scraper's token", client, http.MethodGet, "Bearer good", nil, nil, http.StatusOK, 2},
	} {
		before := api.Reviews()
		code, err := do(c.client, c.method, c.auth, c.body, c.header)
		// A refused header may close the connection before the client
		// has written it all: no status, refused all the same.
		if c.want == http.StatusRequestHeaderFieldsTooLarge && err != nil {
			code = c.want
		}
		if code != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, code, err, c.want)
		}
		if got := api.Reviews() - before; got != c.reviews {
			t.Errorf("%s: %d reviews asked; want %d", c.name, got, c.reviews)
		}
	}
	if n := sent.Load(); n > 8<<20 {
		t.Errorf("the server read %d bytes of a refused request's body; want it to stop early", n)
	}
	// Plain HTTP on the TLS port: no metrics.
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP on the secure port: 200")
		}
	}
}

// TestSecureSlowClientsHoldNobody: clients that connect and send nothing
// (no TLS handshake), or send their header or body a byte at a time
// after it, have their connection closed by the server within its
// limits, and the scraper is answered while they hold theirs.
func TestSecureSlowClientsHoldNobody(t *testing.T) {
	api := reviewapi.New(t)
	addr := serveSecure(t, api, short)
	const wait = 5 * time.Second // far above the limits: a loaded machine is slow
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Go(func() {
			var err error
			switch i % 3 {
			case 0:
				err = slowclient.Silent(addr, wait)
			case 1:
				err = slowclient.SlowHeaderVia(slowclient.TLS, addr, "/metrics", 50*time.Millisecond, wait)
			case 2:
				err = slowclient.SlowBodyVia(slowclient.TLS, addr, "/metrics", 50*time.Millisecond, wait)
			}
			if err != nil {
				errs <- fmt.Errorf("slow client %d: %w", i, err)
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // the slow clients are connected
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer good")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("the scraper among slow clients: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("metrics")) {
			t.Errorf("the scraper among slow clients: %d %q", resp.StatusCode, b)
		}
		t.Logf("the scraper among 16 slow clients: %d after %v", resp.StatusCode, time.Since(t0).Round(time.Millisecond))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// countingReader counts what is read from r.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
