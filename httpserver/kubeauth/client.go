// Package kubeauth lets through only the HTTP requests that the
// Kubernetes API server authenticates and authorises: the bearer token is
// checked with a TokenReview (authentication.k8s.io/v1), and its user's
// right to the request's verb on the request's path with a
// SubjectAccessReview (authorization.k8s.io/v1) of a non-resource URL, as
// controller-runtime's secure metrics serving and kube-rbac-proxy do. A
// Prometheus whose ServiceAccount is granted get on the non-resource URL
// /metrics may scrape; nobody else may.
//
// It talks to the API server with net/http and encoding/json, as the pod's
// ServiceAccount (InCluster), and needs a ClusterRole that lets it create
// tokenreviews and subjectaccessreviews (deploy/ has one).
//
// Guarantees: a request goes through only after the API server said yes,
// then or within the last minute for the same token, and never after the
// token's own expiry (its exp claim, when it is a JWT) (decisions are
// cached by the token's SHA-256, never by the token); when the API server
// cannot be asked, the request is refused with 503, never let through. A
// request without a token is refused without asking anything. One client
// address has at most MaxReviewsPerSource reviews in flight, of
// MaxConcurrentReviews in all: a pod sending made-up tokens waits behind
// its own requests and leaves the other slots to the other clients; a
// request that waits MaxReviewWait for a slot is refused with 503. Limits:
// the token is not bound to an audience (the API server's default
// audiences apply, as for controller-runtime), a token revoked or a
// binding removed takes up to a minute (allowed) or 30 seconds (refused)
// to count, a flood of distinct made-up tokens costs one TokenReview each,
// and clients behind one address (a node's SNAT) share its slot.
package kubeauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The in-cluster defaults: what the kubelet gives every pod that mounts
// its ServiceAccount token.
const (
	DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Config says how to reach the API server. A zero field takes its
// in-cluster default (InCluster).
type Config struct {
	// Server is the API server's URL ("https://10.0.0.1:443"); default
	// from $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT.
	Server string
	// TokenFile holds the bearer token this process authenticates with;
	// re-read every minute (projected tokens rotate).
	TokenFile string
	// CAFile holds the PEM certificates the API server's serving
	// certificate must chain to.
	CAFile string
}

// ErrNotInCluster is matched by InCluster's error when no server is given
// and the environment names none.
var ErrNotInCluster = errors.New("no API server: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not in a pod?)")

// InCluster is c with its zero fields set to the in-cluster defaults.
func (c Config) InCluster() (Config, error) {
	if c.Server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return c, ErrNotInCluster
		}
		c.Server = "https://" + net.JoinHostPort(host, port)
	}
	if c.TokenFile == "" {
		c.TokenFile = DefaultTokenFile
	}
	if c.CAFile == "" {
		c.CAFile = DefaultCAFile
	}
	return c, nil
}

// reviewTimeout bounds one review, as controller-runtime's 10 s.
const reviewTimeout = 10 * time.Second

// tokenRefresh is how often the token file is read again: the kubelet
// rewrites a projected token long before it expires.
const tokenRefresh = time.Minute

// maxAnswer bounds the API server's answer to a review.
const maxAnswer = 1 << 20

// Client asks the API server for TokenReviews and SubjectAccessReviews.
type Client struct {
	server *url.URL
	http   *http.Client
	clock  clock.PassiveClock

	tokenFile string
	mu        sync.Mutex
	token     string
	tokenRead time.Time
}

// NewClient returns a client of the API server c names (its zero fields:
// the in-cluster defaults). It reads the CA file and the token file now,
// so that a bad configuration is said at start.
func NewClient(c Config, clk clock.PassiveClock) (*Client, error) {
	c, err := c.InCluster()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return nil, &ConfigError{What: "server", Value: c.Server, Err: err}
	}
	if u.Scheme != "https" || u.Host == "" {
		return nil, &ConfigError{What: "server", Value: c.Server, Err: errors.New("not an https:// URL")}
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, &ConfigError{What: "CA file", Value: c.CAFile, Err: err}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &ConfigError{What: "CA file", Value: c.CAFile, Err: errors.New("no PEM certificate in it")}
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	cl := &Client{
		server: u,
		http: &http.Client{
			Timeout: reviewTimeout,
			Transport: &http.Transport{
				TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
				Proxy:               nil, // the API server is asked directly
				MaxIdleConnsPerHost: MaxConcurrentReviews,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: reviewTimeout,
			},
		},
		clock:     clk,
		tokenFile: c.TokenFile,
	}
	if _, err := cl.bearer(); err != nil {
		return nil, err
	}
	return cl, nil
}

// ConfigError is a configuration the client cannot use.
type ConfigError struct {
	What  string // "server", "CA file", "token file"
	Value string
	Err   error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("API server %s %s: %v", e.What, e.Value, e.Err)
}
func (e *ConfigError) Unwrap() error { return e.Err }

// bearer is this process's own token, read again once tokenRefresh has
// passed; a failed re-read keeps the last token.
func (c *Client) bearer() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if c.token != "" && now.Sub(c.tokenRead) < tokenRefresh {
		return c.token, nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		err = errors.New("empty")
	}
	if err != nil {
		if c.token != "" {
			return c.token, nil
		}
		return "", &ConfigError{What: "token file", Value: c.tokenFile, Err: err}
	}
	c.token, c.tokenRead = string(bytes.TrimSpace(b)), now
	return c.token, nil
}

// User is who the API server says a token belongs to.
type User struct {
	Username string              `json:"username,omitempty"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// The parts of the review objects this package sends and reads.
type (
	typeMeta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	tokenReview struct {
		typeMeta
		Spec struct {
			Token string `json:"token"`
		} `json:"spec"`
		Status struct {
			Authenticated bool   `json:"authenticated"`
			User          User   `json:"user"`
			Error         string `json:"error,omitempty"`
		} `json:"status"`
	}
	nonResourceAttributes struct {
		Path string `json:"path"`
		Verb string `json:"verb"`
	}
	subjectAccessReview struct {
		typeMeta
		Spec struct {
			User                  string                 `json:"user,omitempty"`
			UID                   string                 `json:"uid,omitempty"`
			Groups                []string               `json:"groups,omitempty"`
			Extra                 map[string][]string    `json:"extra,omitempty"`
			NonResourceAttributes *nonResourceAttributes `json:"nonResourceAttributes"`
		} `json:"spec"`
		Status struct {
			Allowed bool   `json:"allowed"`
			Denied  bool   `json:"denied,omitempty"`
			Reason  string `json:"reason,omitempty"`
		} `json:"status"`
	}
	// status is the API server's answer to a request it refused.
	status struct {
		Message string `json:"message"`
	}
)

// ErrUnauthenticated is matched by ReviewToken's error when the API server
// does not know the token.
var ErrUnauthenticated = errors.New("token not authenticated")

// ReviewError is a review the API server could not be asked, or did not
// answer: the request under review must be refused, not let through.
type ReviewError struct {
	Review string // "TokenReview", "SubjectAccessReview"
	Status int    // the HTTP status, 0 when there was no answer
	Err    error
}

func (e *ReviewError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s: API server answered %d: %v", e.Review, e.Status, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Review, e.Err)
}
func (e *ReviewError) Unwrap() error { return e.Err }

// ReviewToken asks the API server whose token is. An unknown, expired or
// malformed token is an error matching ErrUnauthenticated; a failure to
// ask is a *ReviewError.
func (c *Client) ReviewToken(ctx context.Context, token string) (User, error) {
	var r tokenReview
	r.typeMeta = typeMeta{"authentication.k8s.io/v1", "TokenReview"}
	r.Spec.Token = token
	if err := c.post(ctx, "/apis/authentication.k8s.io/v1/tokenreviews", r.Kind, &r); err != nil {
		return User{}, err
	}
	if !r.Status.Authenticated {
		if r.Status.Error != "" {
			return User{}, fmt.Errorf("%w: %s", ErrUnauthenticated, clip(r.Status.Error))
		}
		return User{}, ErrUnauthenticated
	}
	return r.Status.User, nil
}

// ReviewAccess asks the API server whether u may verb (lower case:
// "get") the non-resource URL path ("/metrics"), and why.
func (c *Client) ReviewAccess(ctx context.Context, u User, verb, path string) (allowed bool, reason string, err error) {
	var r subjectAccessReview
	r.typeMeta = typeMeta{"authorization.k8s.io/v1", "SubjectAccessReview"}
	r.Spec.User, r.Spec.UID, r.Spec.Groups, r.Spec.Extra = u.Username, u.UID, u.Groups, u.Extra
	r.Spec.NonResourceAttributes = &nonResourceAttributes{Path: path, Verb: verb}
	if err := c.post(ctx, "/apis/authorization.k8s.io/v1/subjectaccessreviews", r.Kind, &r); err != nil {
		return false, "", err
	}
	return r.Status.Allowed && !r.Status.Denied, clip(r.Status.Reason), nil
}

// post sends obj to path and decodes the answer into it.
func (c *Client) post(ctx context.Context, path, kind string, obj any) error {
	fail := func(code int, err error) error { return &ReviewError{Review: kind, Status: code, Err: err} }
	token, err := c.bearer()
	if err != nil {
		return fail(0, err)
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return fail(0, err)
	}
	u := *c.server
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return fail(0, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fail(0, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	switch {
	case err != nil:
		return fail(resp.StatusCode, err)
	case len(answer) > maxAnswer:
		return fail(resp.StatusCode, fmt.Errorf("answer over %d bytes", maxAnswer))
	case resp.StatusCode/100 != 2:
		var s status
		if json.Unmarshal(answer, &s) != nil || s.Message == "" {
			s.Message = http.StatusText(resp.StatusCode)
		}
		return fail(resp.StatusCode, errors.New(clip(s.Message)))
	}
	if err := json.Unmarshal(answer, obj); err != nil {
		return fail(resp.StatusCode, fmt.Errorf("decoding the answer: %w", err))
	}
	return nil
}

// clip shortens what the API server says to a log line's length.
func clip(s string) string {
	const maxLen = 256
	if len(s) > maxLen {
		return s[:maxLen] + "..."
	}
	return s
}
