package cli

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeHTTPLimits: serve's HTTP server had a ReadHeaderTimeout and
// nothing else. After one request a keep-alive connection was kept open
// for good (net/http has no idle timeout unless IdleTimeout or
// ReadTimeout is set), so anything that can reach the node (the agent
// runs with hostNetwork) could open connections until the agent ran out
// of descriptors or memory; request headers of up to 1 MiB were read for
// endpoints that take no parameters. Now an idle connection is closed
// after serveHTTP.idleTimeout (shortened here) and a header over
// serveHTTP.maxHeaderBytes is refused.
func TestServeHTTPLimits(t *testing.T) {
	saved := serveHTTP
	t.Cleanup(func() { serveHTTP = saved })
	serveHTTP.idleTimeout = 200 * time.Millisecond
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, root, nil)
	addr := strings.TrimPrefix(ts.url, "http://")

	t.Run("idle keep-alive connection", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Fatal("the server closed the connection after one request; want keep-alive")
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = br.ReadByte()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("an idle keep-alive connection is still open after 5s (idle timeout %v): it is kept for good", serveHTTP.idleTimeout)
		} else if !errors.Is(err, io.EOF) {
			t.Errorf("read on an idle connection = %v; want EOF (closed by the server)", err)
		}
	})

	t.Run("large header", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodGet, ts.url+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Junk", strings.Repeat("a", 200<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("GET /healthz with a 200 KiB header = %d; want 431", resp.StatusCode)
		}
	})
}
