package kubeauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
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
// server at once; requests past it wait (within their context, and
// MaxReviewWait).
const MaxConcurrentReviews = 4

// MaxReviewsPerSource bounds the reviews asked at once for the requests
// of one client address: a pod sending made-up tokens as fast as it can
// holds one of the MaxConcurrentReviews slots, its other requests wait
// behind that one, and the other clients (Prometheus) keep the rest.
const MaxReviewsPerSource = 1

// MaxReviewWait bounds how long a request waits for a review slot before
// it is refused with 503.
const MaxReviewWait = 10 * time.Second

// errBusy is a request that waited MaxReviewWait for a review slot.
var errBusy = errors.New("waited too long for a review slot (too many requests with tokens not seen before)")

// Result is what the Filter did with a request.
type Result string

// The results, the values of the result label.
const (
	Allowed         Result = "allowed"         // passed on
	Unauthenticated Result = "unauthenticated" // 401: no token, or one the API server does not know
	Forbidden       Result = "forbidden"       // 403: the token's user may not
	Unavailable     Result = "unavailable"     // 503: the API server could not be asked
)

// Results are every Result, for a counter that exports each from the
// start (at 0).
func Results() []Result { return []Result{Allowed, Unauthenticated, Forbidden, Unavailable} }

// RequestsMetric is the name, after the program's namespace and
// subsystem, of the counter of a Filter's requests by result (label
// "result", every one of Results exported from the start), and
// RequestsHelp its help: what FilterOptions.Count is for.
const (
	RequestsMetric = "metrics_auth_requests_total"
	RequestsHelp   = "Requests to the TLS metrics endpoint, by what was done with them: allowed, unauthenticated (401), forbidden (403), unavailable (503: the API server could not be asked)."
)

// FilterOptions is what a Filter is made of.
type FilterOptions struct {
	Client *Client
	// Count, when set, is called with what was done with each request,
	// to count them (RequestsMetric); it may be called from several
	// requests at once. A function, not a prometheus.Registerer, so that a
	// program that writes its metrics without client_golang (nodevol)
	// does not link it.
	Count  func(Result)
	Logger logr.Logger        // zero: discard
	Clock  clock.PassiveClock // nil: the real clock
}

// Filter passes on the requests the API server authenticates and
// authorises for their verb on their path, and refuses the others.
type Filter struct {
	client  *Client
	log     logr.Logger
	clock   clock.PassiveClock
	count   func(Result)
	reviews chan struct{}
	maxWait time.Duration // for a review slot: MaxReviewWait

	mu      sync.Mutex
	allowed map[[sha256.Size]byte]time.Time    // expiry
	refused map[[sha256.Size]byte]refusedEntry // by key
	logged  time.Time                          // of the last unavailable logged
	// sources holds the review slots of the client addresses that have
	// a request waiting for a review or in one; an entry goes with its
	// last request, so there are never more than requests in flight.
	sources map[string]*sourceSlots
}

// sourceSlots are one client address's review slots and how many of its
// requests hold or wait for one.
type sourceSlots struct {
	slots chan struct{}
	users int
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
		count:   o.Count,
		reviews: make(chan struct{}, MaxConcurrentReviews),
		maxWait: MaxReviewWait,
		allowed: make(map[[sha256.Size]byte]time.Time),
		refused: make(map[[sha256.Size]byte]refusedEntry),
		sources: make(map[string]*sourceSlots),
	}
	if f.count == nil {
		f.count = func(Result) {}
	}
	return f, nil
}

// Wrap is next behind the filter. What it passes on carries no
// Authorization header.
func (f *Filter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := f.Check(r)
		f.count(res)
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
	res, err := f.review(r.Context(), sourceOf(r.RemoteAddr), token, verb, path)
	if err != nil {
		f.logUnavailable(err)
		return Unavailable
	}
	f.remember(key, res, tokenExpiry(token))
	return res
}

// sourceOf is the client address of a request's RemoteAddr ("ip:port"),
// without the port: one per pod.
func sourceOf(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}

// tokenExpiry is the exp claim of a token that is a JWT (a
// ServiceAccount token), unverified: it only shortens how long an
// allowed decision is remembered, so that a token is never let through
// after it expired. Zero when the token says none.
func tokenExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return time.Time{}
	}
	exp, err := claims.Exp.Float64()
	if err != nil || exp <= 0 || exp >= 1<<40 {
		return time.Time{}
	}
	return time.Unix(int64(exp), 0)
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

// review asks the API server, waiting for a free review slot of the
// client's address, then for one of all.
func (f *Filter) review(ctx context.Context, source, token, verb, path string) (Result, error) {
	release, err := f.acquire(ctx, source)
	if err != nil {
		return "", &ReviewError{Review: "TokenReview", Err: err}
	}
	defer release()
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

// acquire waits, at most maxWait, for a review slot of source and
// then for one of all; release gives both back.
func (f *Filter) acquire(ctx context.Context, source string) (release func(), err error) {
	f.mu.Lock()
	src := f.sources[source]
	if src == nil {
		src = &sourceSlots{slots: make(chan struct{}, MaxReviewsPerSource)}
		f.sources[source] = src
	}
	src.users++
	f.mu.Unlock()
	leave := func() {
		f.mu.Lock()
		if src.users--; src.users == 0 {
			delete(f.sources, source)
		}
		f.mu.Unlock()
	}
	timer := time.NewTimer(f.maxWait)
	defer timer.Stop()
	select {
	case src.slots <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, context.Cause(ctx)
	case <-timer.C:
		leave()
		return nil, errBusy
	}
	select {
	case f.reviews <- struct{}{}:
	case <-ctx.Done():
		<-src.slots
		leave()
		return nil, context.Cause(ctx)
	case <-timer.C:
		<-src.slots
		leave()
		return nil, errBusy
	}
	return func() {
		<-f.reviews
		<-src.slots
		leave()
	}, nil
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

// remember keeps a decision for its TTL; an allowed one no longer than
// until exp, the token's expiry (zero: none known).
func (f *Filter) remember(key [sha256.Size]byte, res Result, exp time.Time) {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if res == Allowed {
		until := now.Add(AllowedTTL)
		if !exp.IsZero() && exp.Before(until) {
			until = exp
		}
		if !now.Before(until) {
			return
		}
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
		f.allowed[key] = until
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
