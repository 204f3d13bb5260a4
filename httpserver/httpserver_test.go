package httpserver

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/testsupport/slowclient"
)

// serve serves srv on a loopback port until the test ends and returns
// its address.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func ok(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }

// short are limits a test can wait for.
var short = Limits{
	ReadHeaderTimeout: 300 * time.Millisecond,
	ReadTimeout:       600 * time.Millisecond,
	WriteTimeout:      600 * time.Millisecond,
	IdleTimeout:       300 * time.Millisecond,
	MaxHeaderBytes:    1 << 10,
}

// TestNewLimitsSlowClients: a server from New closes the connection of a
// client that stays idle, or sends its header or its body a byte at a
// time, once the limit has passed; it refuses a header over
// MaxHeaderBytes.
func TestNewLimitsSlowClients(t *testing.T) {
	addr := serve(t, New(http.HandlerFunc(ok), short))
	const wait = 5 * time.Second // far above the limits: a loaded machine is slow
	checks := map[string]func() error{
		"idle keep-alive": func() error { return slowclient.Idle(addr, "/", wait) },
		"slow header":     func() error { return slowclient.SlowHeader(addr, "/", 50*time.Millisecond, wait) },
		"slow body":       func() error { return slowclient.SlowBody(addr, "/", 50*time.Millisecond, wait) },
	}
	for name, check := range checks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := check(); err != nil {
				t.Errorf("a client %s: %v; want the connection closed by the server", name, err)
			}
		})
	}
	t.Run("large header", func(t *testing.T) {
		if err := slowclient.LargeHeader(addr, "/", 64<<10); err != nil {
			t.Error(err)
		}
	})
}

// TestSlowClientsHoldABareServer: the checks above are not vacuous. A
// server with only a header timeout — what nodevol-csi had — keeps an idle
// keep-alive connection and a request whose body trickles in.
func TestSlowClientsHoldABareServer(t *testing.T) {
	addr := serve(t, &http.Server{Handler: http.HandlerFunc(ok), ReadHeaderTimeout: short.ReadHeaderTimeout})
	const wait = time.Second
	if err := slowclient.Idle(addr, "/", wait); !errors.Is(err, slowclient.ErrHeld) {
		t.Errorf("an idle client of a server without IdleTimeout: %v; want %v", err, slowclient.ErrHeld)
	}
	if err := slowclient.SlowBody(addr, "/", 50*time.Millisecond, wait); !errors.Is(err, slowclient.ErrHeld) {
		t.Errorf("a slow body sent to a server without ReadTimeout: %v; want %v", err, slowclient.ErrHeld)
	}
}

// TestZeroLimitsAreTheDefaults: no limit can be switched off; a zero or
// negative field takes its default.
func TestZeroLimitsAreTheDefaults(t *testing.T) {
	for _, l := range []Limits{{}, {ReadTimeout: -1, IdleTimeout: -1, MaxHeaderBytes: -1}} {
		s := New(http.NotFoundHandler(), l)
		got := Limits{s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes}
		if got != defaults {
			t.Errorf("New(h, %+v) has limits %+v; want the defaults %+v", l, got, defaults)
		}
	}
	s := New(http.NotFoundHandler(), short)
	if got := (Limits{s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes}); got != short {
		t.Errorf("New(h, %+v) has limits %+v", short, got)
	}
}
