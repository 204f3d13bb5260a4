package kubeauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// How long a decision is remembered: an allowed token for a minute (as
// controller-runtime's token cache), a refused one for 30 seconds (as its
// deny cache). A failure to ask is never remembered.
const (
	AllowedTTL = time.Minute
	RefusedTTL = 30 * time.Second
)

// The cache's bounds. Allowed entries need a token the API server
// accepted and authorised, so there are few (a Prometheus or two, a new
// entry when its token rotates). Refused entries are what anyone who can
// reach the port chooses: when they fill their share, the ones that have
// expired go, and if none has, a new refusal is not remembered. The
// tokens themselves are never kept, only their SHA-256.
const (
	maxAllowed = 256
	maxRefused = 1024
)

// MaxConcurrentReviews bounds the reviews the Filter asks of the API
// server at once; requests past it wait (within their context).
const MaxConcurrentReviews = 4

// Result is what the Filter did with a request.
type Result string

// The results, the values of the result label.
const (
	Allowed         Result = "allowed"         // passed on
	Unauthenticated Result = "unauthenticated" // 401: no token, or one the API server does not know
	Forbidden       Result = "forbidden"       // 403: the token's user may not
	Unavailable     Result = "unavailable"     // 503: the API server could not be asked
)

// FilterOptions is what a Filter is made of.
type FilterOptions struct {
	Client *Client
	// Registerer receives the Filter's counter,
	// <Namespace>_<Subsystem>_metrics_auth_requests_total{result}; nil: none.
	Registerer           prometheus.Registerer
	Namespace, Subsystem string
	Logger               logr.Logger        // zero: discard
	Clock                clock.PassiveClock // nil: the real clock
}

// Filter passes on the requests the API server authenticates and
// authorises for their verb on their path, and refuses the others.
type Filter struct {
	client   *Client
	log      logr.Logger
	clock    clock.PassiveClock
	requests *prometheus.CounterVec
	reviews  chan struct{}

	mu      sync.Mutex
	allowed map[[sha256.Size]byte]time.Time    // expiry
	refused map[[sha256.Size]byte]refusedEntry // by key
	logged  time.Time                          // of the last unavailable logged
}

type refusedEntry struct {
	result  Result
	expires time.Time
}

// NewFilter returns a filter that asks o.Client.
func NewFilter(o FilterOptions) (*Filter, error) {
	if o.Client == nil {
		return nil, errors.New("kubeauth: a Filter needs a Client")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	f := &Filter{
		client: o.Client, log: o.Logger, clock: o.Clock,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.Namespace, Subsystem: o.Subsystem, Name: "metrics_auth_requests_total",
			Help: "Requests to the TLS metrics endpoint, by what was done with them: allowed, unauthenticated (401), forbidden (403), unavailable (503: the API server could not be asked).",
		}, []string{"result"}),
		reviews: make(chan struct{}, MaxConcurrentReviews),
		allowed: make(map[[sha256.Size]byte]time.Time),
		refused: make(map[[sha256.Size]byte]refusedEntry),
	}
	for _, r := range []Result{Allowed, Unauthenticated, Forbidden, Unavailable} {
		f.requests.WithLabelValues(string(r))
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(f.requests); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Wrap is next behind the filter. What it passes on carries no
// Authorization header.
func (f *Filter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := f.Check(r)
		f.requests.WithLabelValues(string(res)).Inc()
		switch res {
		case Allowed:
			r = r.Clone(r.Context())
			r.Header.Del("Authorization")
			next.ServeHTTP(w, r)
		case Unauthenticated:
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		case Forbidden:
			http.Error(w, "Forbidden", http.StatusForbidden)
		default:
			http.Error(w, "Authorization unavailable", http.StatusServiceUnavailable)
		}
	})
}

// Check decides about r: its bearer token's user's right to its method
// (in lower case, as a verb) on its path.
func (f *Filter) Check(r *http.Request) Result {
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return Unauthenticated
	}
	verb, path := strings.ToLower(r.Method), r.URL.Path
	h := sha256.New()
	h.Write([]byte(verb))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write([]byte(token))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	if res, ok := f.cached(key); ok {
		return res
	}
	res, err := f.review(r.Context(), token, verb, path)
	if err != nil {
		f.logUnavailable(err)
		return Unavailable
	}
	f.remember(key, res)
	return res
}

// bearerToken is the token of an "Authorization: Bearer <token>" header.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// review asks the API server, waiting for a free review slot.
func (f *Filter) review(ctx context.Context, token, verb, path string) (Result, error) {
	select {
	case f.reviews <- struct{}{}:
	case <-ctx.Done():
		return "", &ReviewError{Review: "TokenReview", Err: context.Cause(ctx)}
	}
	defer func() { <-f.reviews }()
	u, err := f.client.ReviewToken(ctx, token)
	if errors.Is(err, ErrUnauthenticated) {
		f.log.V(2).Info("metrics request refused: token not authenticated", "reason", err.Error())
		return Unauthenticated, nil
	}
	if err != nil {
		return "", err
	}
	allowed, reason, err := f.client.ReviewAccess(ctx, u, verb, path)
	if err != nil {
		return "", err
	}
	if !allowed {
		f.log.V(2).Info("metrics request refused: not authorised", "user", u.Username, "verb", verb, "path", path, "reason", reason)
		return Forbidden, nil
	}
	return Allowed, nil
}

// logUnavailable logs a failure to ask the API server, at most once every
// 10 seconds (the counter counts them all).
func (f *Filter) logUnavailable(err error) {
	now := f.clock.Now()
	f.mu.Lock()
	quiet := !f.logged.IsZero() && now.Sub(f.logged) < 10*time.Second
	if !quiet {
		f.logged = now
	}
	f.mu.Unlock()
	if !quiet {
		f.log.Error(err, "metrics request refused: the API server could not be asked (refusing further ones as well until it answers; logged at most every 10s)")
	}
}

func (f *Filter) cached(key [sha256.Size]byte) (Result, bool) {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if exp, ok := f.allowed[key]; ok {
		if now.Before(exp) {
			return Allowed, true
		}
		delete(f.allowed, key)
	}
	if e, ok := f.refused[key]; ok {
		if now.Before(e.expires) {
			return e.result, true
		}
		delete(f.refused, key)
	}
	return "", false
}

func (f *Filter) remember(key [sha256.Size]byte, res Result) {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if res == Allowed {
		if len(f.allowed) >= maxAllowed {
			for k, exp := range f.allowed {
				if !now.Before(exp) {
					delete(f.allowed, k)
				}
			}
		}
		if len(f.allowed) >= maxAllowed {
			for k := range f.allowed { // one, the map's choice
				delete(f.allowed, k)
				break
			}
		}
		f.allowed[key] = now.Add(AllowedTTL)
		return
	}
	if len(f.refused) >= maxRefused {
		for k, e := range f.refused {
			if !now.Before(e.expires) {
				delete(f.refused, k)
			}
		}
		if len(f.refused) >= maxRefused {
			return
		}
	}
	f.refused[key] = refusedEntry{result: res, expires: now.Add(RefusedTTL)}
}
