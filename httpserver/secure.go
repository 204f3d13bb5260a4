package httpserver

import (
	"crypto/tls"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/httpserver/kubeauth"
)

// SecureOptions is how NewSecure serves: the serving certificate and how
// to reach the API server that authenticates and authorises clients.
type SecureOptions struct {
	// CertFile and KeyFile are a PEM certificate (chain) and its key,
	// reloaded when they change; both empty: a self-signed certificate
	// made at start.
	CertFile, KeyFile string
	// API is the API server to ask (zero fields: in-cluster defaults).
	API kubeauth.Config
}

// AddFlags declares o's flags on fs.
func (o *SecureOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.CertFile, "tls-cert-file", "", "the TLS serving certificate (PEM, chain allowed) of the secure metrics endpoint, reloaded when it changes (default: a self-signed one made at start)")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", "", "the key of --tls-cert-file")
	fs.StringVar(&o.API.Server, "kube-api-server", "", "the API server that reviews metrics clients, as an https:// URL (default from $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT)")
	fs.StringVar(&o.API.TokenFile, "kube-token-file", "", "the bearer token to ask the API server with (default "+kubeauth.DefaultTokenFile+")")
	fs.StringVar(&o.API.CAFile, "kube-ca-file", "", "the CA certificates of the API server (default "+kubeauth.DefaultCAFile+")")
}

// ErrCertWithoutKey is matched by Check's error when only one of the
// certificate and the key is given.
var ErrCertWithoutKey = errors.New("--tls-cert-file and --tls-private-key-file go together")

// Check says what is wrong with o without reading anything.
func (o *SecureOptions) Check() error {
	if (o.CertFile == "") != (o.KeyFile == "") {
		return ErrCertWithoutKey
	}
	return nil
}

// quietLog passes the server's error lines to a logr.Logger, at most one
// every 10 seconds, and counts the ones it drops.
type quietLog struct {
	log   logr.Logger
	clock clock.PassiveClock

	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (q *quietLog) Write(p []byte) (int, error) {
	if q.log.GetSink() == nil {
		return len(p), nil
	}
	now := time.Now()
	if q.clock != nil {
		now = q.clock.Now()
	}
	q.mu.Lock()
	if !q.last.IsZero() && now.Sub(q.last) < 10*time.Second {
		q.dropped++
		q.mu.Unlock()
		return len(p), nil
	}
	dropped := q.dropped
	q.last, q.dropped = now, 0
	q.mu.Unlock()
	q.log.Info("HTTPS server: "+strings.TrimSpace(string(p)), "droppedSinceLast", dropped)
	return len(p), nil
}

// SecureMetrics is where NewSecure counts its decisions and says what it
// does.
type SecureMetrics struct {
	// Count counts the requests by what was done with them
	// (kubeauth.RequestsMetric); nil: not counted.
	Count  func(kubeauth.Result)
	Logger logr.Logger
	Clock  clock.PassiveClock // nil: the real clock
}

// NewSecure returns a server for h, with the limits l, that serves only
// over TLS (1.2 at least, HTTP/1.1) and passes on only the requests whose
// bearer token the API server authenticates and authorises for the
// request's verb on its path (package kubeauth); it refuses the others
// with 401, 403, or 503 when the API server cannot be asked. The caller
// serves it with ServeTLS(listener, "", "").
func NewSecure(h http.Handler, l Limits, o SecureOptions, m SecureMetrics) (*http.Server, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	client, err := kubeauth.NewClient(o.API, m.Clock)
	if err != nil {
		return nil, err
	}
	filter, err := kubeauth.NewFilter(kubeauth.FilterOptions{Client: client, Count: m.Count,
		Logger: m.Logger, Clock: m.Clock})
	if err != nil {
		return nil, err
	}
	var getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	if o.CertFile != "" {
		files, err := LoadCertificateFiles(o.CertFile, o.KeyFile, m.Clock, m.Logger)
		if err != nil {
			return nil, err
		}
		getCert = files.GetCertificate
	} else {
		clk := m.Clock
		if clk == nil {
			clk = clock.RealClock{}
		}
		hosts := []string{"localhost", "127.0.0.1"}
		if name, err := os.Hostname(); err == nil && name != "" {
			hosts = append(hosts, name)
		}
		cert, err := SelfSignedCertificate(hosts, clk.Now())
		if err != nil {
			return nil, err
		}
		getCert = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	srv := New(filter.Wrap(h), l)
	// net/http logs each failed TLS handshake: anyone who can connect
	// would choose how much the agent logs.
	srv.ErrorLog = log.New(&quietLog{log: m.Logger, clock: m.Clock}, "", 0)
	srv.TLSConfig = TLSConfig(getCert)
	// HTTP/1.1 only: what Prometheus speaks; HTTP/2's stream handling
	// is surface an unauthenticated client need not reach.
	srv.TLSConfig.NextProtos = []string{"http/1.1"}
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	return srv, nil
}
