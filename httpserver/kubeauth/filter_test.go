package kubeauth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// fakeAPI is an httptest stand-in for the two review endpoints: tokens
// maps a token to its user ("" and unknown tokens are not
// authenticated), may lists the users allowed get on /metrics.
type fakeAPI struct {
	srv    *httptest.Server
	tokens map[string]string
	may    map[string]bool

	mu      sync.Mutex
	calls   map[string]int // by kind
	bearers []string       // the Authorization of each call
	sars    []subjectAccessReview
	fail    int           // answer this status instead, when not 0
	block   chan struct{} // when set, each review waits for it
	// slow, when set, is what a TokenReview of a token starting with
	// "slow-" waits for.
	slow     chan struct{}
	inFlight atomic.Int32
	maxIn    atomic.Int32
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{
		tokens: map[string]string{"good": "system:serviceaccount:monitoring:prometheus", "other": "system:serviceaccount:x:y"},
		may:    map[string]bool{"system:serviceaccount:monitoring:prometheus": true},
		calls:  map[string]int{},
	}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxIn.Load()
		if n <= m || f.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.mu.Lock()
	block, slow, fail := f.block, f.slow, f.fail
	f.bearers = append(f.bearers, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	if slow != nil && bytes.Contains(body, []byte(`"token":"slow-`)) {
		<-slow
	}
	if fail != 0 {
		w.WriteHeader(fail)
		fmt.Fprintf(w, `{"kind":"Status","message":"the fake fails with %d"}`, fail)
		return
	}
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		var tr tokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil || tr.Kind != "TokenReview" || tr.APIVersion != "authentication.k8s.io/v1" {
			http.Error(w, "bad TokenReview", http.StatusBadRequest)
			return
		}
		f.count("TokenReview")
		if u, ok := f.tokens[tr.Spec.Token]; ok {
			tr.Status.Authenticated = true
			tr.Status.User = User{Username: u, UID: "uid-" + u, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
		} else {
			tr.Status.Error = "invalid bearer token"
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(&tr)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		var sar subjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil || sar.Kind != "SubjectAccessReview" || sar.Spec.NonResourceAttributes == nil {
			http.Error(w, "bad SubjectAccessReview", http.StatusBadRequest)
			return
		}
		f.count("SubjectAccessReview")
		f.mu.Lock()
		f.sars = append(f.sars, sar)
		f.mu.Unlock()
		a := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = f.may[sar.Spec.User] && a.Path == "/metrics" && a.Verb == "get"
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(&sar)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeAPI) count(kind string) {
	f.mu.Lock()
	f.calls[kind]++
	f.mu.Unlock()
}

func (f *fakeAPI) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls["TokenReview"] + f.calls["SubjectAccessReview"]
}

func (f *fakeAPI) setFail(code int) {
	f.mu.Lock()
	f.fail = code
	f.mu.Unlock()
}

// config writes the fake's CA and a token file for this process.
func (f *fakeAPI) config(t *testing.T) Config {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	der := f.srv.Certificate().Raw
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("agent-token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Config{Server: f.srv.URL, CAFile: ca, TokenFile: tok}
}

type filterEnv struct {
	api    *fakeAPI
	filter *Filter
	clock  *clocktesting.FakeClock
	h      http.Handler
	cfg    Config
	seen   atomic.Value // the Authorization header the wrapped handler saw

	mu     sync.Mutex
	counts map[Result]int // what FilterOptions.Count was called with
}

// counted is how many requests the Filter counted with r.
func (e *filterEnv) counted(r Result) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return float64(e.counts[r])
}

func newFilterEnv(t *testing.T) *filterEnv {
	e := &filterEnv{api: newFakeAPI(t), clock: clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))}
	e.cfg = e.api.config(t)
	c, err := NewClient(e.cfg, e.clock)
	if err != nil {
		t.Fatal(err)
	}
	e.filter, err = NewFilter(FilterOptions{Client: c, Clock: e.clock, Count: func(r Result) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.counts == nil {
			e.counts = map[Result]int{}
		}
		e.counts[r]++
	}})
	if err != nil {
		t.Fatal(err)
	}
	e.h = e.filter.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.seen.Store(r.Header.Get("Authorization"))
		fmt.Fprintln(w, "metrics")
	}))
	return e
}

// get sends GET path with the Authorization header auth ("": none).
func (e *filterEnv) get(path, auth string) *httptest.ResponseRecorder {
	return e.getFrom("192.0.2.1:1234", path, auth)
}

// getFrom is get from the client address remoteAddr ("ip:port").
func (e *filterEnv) getFrom(remoteAddr, path, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remoteAddr
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// TestFilterDecisions: the four answers, their short bodies, and which
// of them asked the API server.
func TestFilterDecisions(t *testing.T) {
	e := newFilterEnv(t)
	for _, c := range []struct {
		name, auth string
		code       int
		calls      int // reviews asked
	}{
		{"no header", "", http.StatusUnauthorized, 0},
		{"not a bearer", "Basic Z29vZA==", http.StatusUnauthorized, 0},
		{"an empty bearer", "Bearer ", http.StatusUnauthorized, 0},
		{"an unknown token", "Bearer made-up", http.StatusUnauthorized, 1},
		{"a token whose user may not", "Bearer other", http.StatusForbidden, 2},
		{"a token whose user may", "Bearer good", http.StatusOK, 2},
		{"the scheme in lower case", "bearer good", http.StatusOK, 0},
	} {
		before := e.api.callCount()
		w := e.get("/metrics", c.auth)
		if w.Code != c.code {
			t.Errorf("%s: %d %q; want %d", c.name, w.Code, w.Body.String(), c.code)
		}
		if got := e.api.callCount() - before; got != c.calls {
			t.Errorf("%s: %d reviews asked; want %d", c.name, got, c.calls)
		}
		if w.Code != http.StatusOK && w.Body.Len() > 32 {
			t.Errorf("%s: a %d-byte body; want a short one", c.name, w.Body.Len())
		}
		if w.Code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
	}
	if seen, _ := e.seen.Load().(string); seen != "" {
		t.Errorf("the wrapped handler saw Authorization %q; want it removed", seen)
	}
	// What was asked: the token's user, groups and UID, get on /metrics,
	// as this process's own token.
	e.api.mu.Lock()
	defer e.api.mu.Unlock()
	sar := e.api.sars[len(e.api.sars)-1].Spec
	if sar.User != "system:serviceaccount:monitoring:prometheus" || sar.UID == "" || len(sar.Groups) != 2 || *sar.NonResourceAttributes != (nonResourceAttributes{Path: "/metrics", Verb: "get"}) {
		t.Errorf("SubjectAccessReview spec %+v", sar)
	}
	for _, b := range e.api.bearers {
		if b != "Bearer agent-token-1" {
			t.Errorf("the API server was asked with Authorization %q; want the token file's", b)
		}
	}
	if got := e.counted(Unauthenticated); got != 4 {
		t.Errorf("unauthenticated counted %v; want 4", got)
	}
}

// TestFilterCachesDecisionsForTheirTTL: an allowed token is asked about
// again after AllowedTTL, a refused one after RefusedTTL, and a failure
// to ask is never remembered.
func TestFilterCachesDecisionsForTheirTTL(t *testing.T) {
	e := newFilterEnv(t)
	ask := func(auth string, want int) int {
		t.Helper()
		before := e.api.callCount()
		if w := e.get("/metrics", auth); w.Code != want {
			t.Fatalf("%s: %d; want %d", auth, w.Code, want)
		}
		return e.api.callCount() - before
	}
	if ask("Bearer good", 200) != 2 || ask("Bearer good", 200) != 0 || ask("Bearer other", 403) != 2 || ask("Bearer other", 403) != 0 {
		t.Fatal("the second request of the same token asked again")
	}
	e.clock.Step(RefusedTTL)
	if ask("Bearer good", 200) != 0 || ask("Bearer other", 403) != 2 {
		t.Error("after RefusedTTL: the allowed decision should stay, the refusal go")
	}
	e.clock.Step(AllowedTTL - RefusedTTL)
	if ask("Bearer good", 200) != 2 {
		t.Error("after AllowedTTL the allowed token was not asked about again")
	}
	// Another path or verb is another question.
	before := e.api.callCount()
	if w := e.get("/other", "Bearer good"); w.Code != http.StatusForbidden || e.api.callCount()-before != 2 {
		t.Errorf("GET /other with the allowed token: %d after %d reviews; want 403 after 2", w.Code, e.api.callCount()-before)
	}
	e.api.setFail(http.StatusInternalServerError)
	e.clock.Step(AllowedTTL)
	for range 2 {
		if w := e.get("/metrics", "Bearer good"); w.Code != http.StatusServiceUnavailable {
			t.Errorf("the API server failing: %d; want 503", w.Code)
		}
	}
	e.api.setFail(0)
	if ask("Bearer good", 200) != 2 {
		t.Error("a failure was remembered")
	}
	if got := e.counted(Unavailable); got != 2 {
		t.Errorf("unavailable counted %v; want 2", got)
	}
}

// TestFilterAPIServerUnreachable: nothing answers; refused, never let
// through.
func TestFilterAPIServerUnreachable(t *testing.T) {
	e := newFilterEnv(t)
	e.api.srv.Close()
	if w := e.get("/metrics", "Bearer good"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("no API server: %d %q; want 503", w.Code, w.Body.String())
	}
}

// TestFilterCacheBounded: made-up tokens, far more than the cache holds,
// neither grow it past its bound nor evict the allowed scraper's
// decision; the tokens are never kept.
func TestFilterCacheBounded(t *testing.T) {
	e := newFilterEnv(t)
	e.get("/metrics", "Bearer good")
	long := strings.Repeat("x", 4096)
	for i := range 3 * maxRefused {
		if w := e.get("/metrics", fmt.Sprintf("Bearer %s-%d", long, i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("made-up token %d: %d", i, w.Code)
		}
	}
	e.filter.mu.Lock()
	refused, allowed := len(e.filter.refused), len(e.filter.allowed)
	e.filter.mu.Unlock()
	if refused > maxRefused || allowed != 1 {
		t.Errorf("after %d made-up tokens: %d refusals, %d allowed remembered; want at most %d and 1", 3*maxRefused, refused, allowed, maxRefused)
	}
	before := e.api.callCount()
	if w := e.get("/metrics", "Bearer good"); w.Code != http.StatusOK || e.api.callCount() != before {
		t.Errorf("the scraper after the flood: %d, %d reviews; want 200 from the cache", w.Code, e.api.callCount()-before)
	}
	// Once they expire, new refusals are remembered again.
	e.clock.Step(RefusedTTL)
	e.get("/metrics", "Bearer late")
	e.filter.mu.Lock()
	refused = len(e.filter.refused)
	e.filter.mu.Unlock()
	if refused != 1 {
		t.Errorf("after expiry: %d refusals remembered; want 1", refused)
	}
}

// TestFilterBoundsConcurrentReviews: requests beyond
// MaxConcurrentReviews wait instead of asking at once (from as many
// clients: one client alone gets MaxReviewsPerSource).
func TestFilterBoundsConcurrentReviews(t *testing.T) {
	e := newFilterEnv(t)
	block := make(chan struct{})
	e.api.mu.Lock()
	e.api.block = block
	e.api.mu.Unlock()
	var wg sync.WaitGroup
	for i := range 4 * MaxConcurrentReviews {
		wg.Go(func() { e.getFrom(fmt.Sprintf("10.0.0.%d:4000", i), "/metrics", fmt.Sprintf("Bearer t%d", i)) })
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.api.inFlight.Load() < MaxConcurrentReviews && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // would more arrive?
	close(block)
	wg.Wait()
	if m := e.api.maxIn.Load(); m != MaxConcurrentReviews {
		t.Errorf("%d reviews at once; want %d", m, MaxConcurrentReviews)
	}
}

// TestClientRereadsItsToken: the token file is read again once a minute
// has passed (projected tokens rotate); a failed read keeps the last.
func TestClientRereadsItsToken(t *testing.T) {
	e := newFilterEnv(t)
	if err := os.WriteFile(e.cfg.TokenFile, []byte("agent-token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.get("/metrics", "Bearer a")
	e.clock.Step(tokenRefresh)
	e.get("/metrics", "Bearer b")
	if err := os.Remove(e.cfg.TokenFile); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(tokenRefresh)
	e.get("/metrics", "Bearer c")
	e.api.mu.Lock()
	got := strings.Join(e.api.bearers, ",")
	e.api.mu.Unlock()
	if want := "Bearer agent-token-1,Bearer agent-token-2,Bearer agent-token-2"; got != want {
		t.Errorf("asked with %s; want %s", got, want)
	}
}

// TestNewClientRefusesBadConfig: each mistake is a *ConfigError naming
// it, said at start.
func TestNewClientRefusesBadConfig(t *testing.T) {
	api := newFakeAPI(t)
	good := api.config(t)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	for name, c := range map[string]Config{
		"plain http":  {Server: "http://127.0.0.1:1", CAFile: good.CAFile, TokenFile: good.TokenFile},
		"no CA file":  {Server: good.Server, CAFile: "/nonexistent", TokenFile: good.TokenFile},
		"CA not PEM":  {Server: good.Server, CAFile: good.TokenFile, TokenFile: good.TokenFile},
		"no token":    {Server: good.Server, CAFile: good.CAFile, TokenFile: "/nonexistent"},
		"empty token": {Server: good.Server, CAFile: good.CAFile, TokenFile: empty},
	} {
		_, err := NewClient(c, nil)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: %v; want a *ConfigError", name, err)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := NewClient(Config{}, nil); !errors.Is(err, ErrNotInCluster) {
		t.Errorf("no server and no environment: %v; want ErrNotInCluster", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	if c, err := (Config{}).InCluster(); err != nil || c.Server != "https://10.0.0.1:443" || c.TokenFile != DefaultTokenFile || c.CAFile != DefaultCAFile {
		t.Errorf("InCluster: %+v, %v", c, err)
	}
}

// TestFilterOneClientCannotHoldTheReviews: a client sending made-up
// tokens faster than the API server answers has one review in flight,
// its other requests wait behind it; another client's token is reviewed
// and let through meanwhile, and its requests never wait for the
// flood's. The flood's requests are refused (401) once answered.
func TestFilterOneClientCannotHoldTheReviews(t *testing.T) {
	e := newFilterEnv(t)
	slow := make(chan struct{})
	e.api.mu.Lock()
	e.api.slow = slow
	e.api.mu.Unlock()
	const flood = 8 * MaxConcurrentReviews
	codes := make(chan int, flood)
	var wg sync.WaitGroup
	for i := range flood {
		wg.Go(func() { codes <- e.getFrom("10.1.0.66:5000", "/metrics", fmt.Sprintf("Bearer slow-%d", i)).Code })
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.api.inFlight.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // would more of the flood's arrive?
	if n := e.api.inFlight.Load(); n != MaxReviewsPerSource {
		t.Errorf("%d of one client's reviews in flight; want %d", n, MaxReviewsPerSource)
	}
	t0 := time.Now()
	scraped := make(chan int, 1)
	go func() { scraped <- e.getFrom("10.1.0.9:6000", "/metrics", "Bearer good").Code }()
	select {
	case code := <-scraped:
		if code != http.StatusOK {
			t.Errorf("the scraper during the flood: %d; want 200", code)
		}
		t.Logf("the scraper's first scrape during the flood: %d after %v", code, time.Since(t0).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Error("the scraper still waits for the flood's reviews after 5 s")
	}
	close(slow)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusUnauthorized {
			t.Errorf("a made-up token of the flood: %d; want 401", c)
		}
	}
	e.filter.mu.Lock()
	left := len(e.filter.sources)
	e.filter.mu.Unlock()
	if left != 0 {
		t.Errorf("%d client addresses still held after every request ended; want 0", left)
	}
}

// TestFilterRefusesAfterWaitingTooLong: a request that waits
// MaxReviewWait for its client's review slot is refused with 503 (and
// counted as unavailable), never let through, and frees its place.
func TestFilterRefusesAfterWaitingTooLong(t *testing.T) {
	e := newFilterEnv(t)
	e.filter.maxWait = 200 * time.Millisecond
	slow := make(chan struct{})
	e.api.mu.Lock()
	e.api.slow = slow
	e.api.mu.Unlock()
	first := make(chan int, 1)
	go func() { first <- e.getFrom("10.1.0.66:5000", "/metrics", "Bearer slow-1").Code }()
	deadline := time.Now().Add(5 * time.Second)
	for e.api.inFlight.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	if w := e.getFrom("10.1.0.66:5001", "/metrics", "Bearer good"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("behind the same client's review for %v: %d; want 503", time.Since(t0), w.Code)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("refused after %v; want about %v", took, e.filter.maxWait)
	}
	close(slow)
	if c := <-first; c != http.StatusUnauthorized {
		t.Errorf("the slow review's request: %d; want 401", c)
	}
	if got := e.counted(Unavailable); got != 1 {
		t.Errorf("unavailable counted %v; want 1", got)
	}
	if w := e.getFrom("10.1.0.66:5002", "/metrics", "Bearer good"); w.Code != http.StatusOK {
		t.Errorf("the same client afterwards: %d; want 200", w.Code)
	}
}

// jwtWithExp is a token shaped as a JWT (unsigned: the fake API server
// decides) whose exp claim is exp.
func jwtWithExp(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256"}`)) + "." + enc(fmt.Appendf(nil, `{"sub":"system:serviceaccount:monitoring:prometheus","exp":%d}`, exp.Unix())) + ".c2ln"
}

// TestFilterNeverLetsATokenThroughAfterItsExpiry: an allowed decision is
// remembered for AllowedTTL at most, and no longer than the token's exp
// claim: a token the API server accepted 20 s before it expired is
// asked about again at its expiry, not let through from the cache.
func TestFilterNeverLetsATokenThroughAfterItsExpiry(t *testing.T) {
	e := newFilterEnv(t)
	tok := jwtWithExp(e.clock.Now().Add(20 * time.Second))
	e.api.tokens[tok] = "system:serviceaccount:monitoring:prometheus"
	if w := e.get("/metrics", "Bearer "+tok); w.Code != http.StatusOK {
		t.Fatalf("the token before its expiry: %d; want 200", w.Code)
	}
	before := e.api.callCount()
	e.clock.Step(19 * time.Second)
	if w := e.get("/metrics", "Bearer "+tok); w.Code != http.StatusOK || e.api.callCount() != before {
		t.Errorf("1 s before its expiry: %d after %d reviews; want 200 from the cache", w.Code, e.api.callCount()-before)
	}
	// The API server now says what it says of an expired token.
	delete(e.api.tokens, tok)
	e.clock.Step(time.Second)
	if w := e.get("/metrics", "Bearer "+tok); w.Code != http.StatusUnauthorized || e.api.callCount() == before {
		t.Errorf("at its expiry: %d after %d reviews; want 401 from the API server", w.Code, e.api.callCount()-before)
	}
	// One the API server accepts though it says it expired (a clock
	// ahead of the API server's) is let through, and not remembered.
	old := jwtWithExp(e.clock.Now().Add(-time.Second))
	e.api.tokens[old] = "system:serviceaccount:monitoring:prometheus"
	for range 2 {
		before := e.api.callCount()
		if w := e.get("/metrics", "Bearer "+old); w.Code != http.StatusOK || e.api.callCount()-before != 2 {
			t.Errorf("a token past its exp that the API server accepts: %d after %d reviews; want 200 after 2", w.Code, e.api.callCount()-before)
		}
	}
}

// TestTokenExpiry: the exp claim of a JWT-shaped token; zero for
// anything else, never an error.
func TestTokenExpiry(t *testing.T) {
	at := time.Unix(1_900_000_000, 0)
	enc := base64.RawURLEncoding.EncodeToString
	for _, c := range []struct {
		token string
		want  time.Time
	}{
		{jwtWithExp(at), at},
		{"made-up", time.Time{}},
		{"a.b.c", time.Time{}},
		{"a." + enc([]byte(`{"exp":"soon"}`)) + ".c", time.Time{}},
		{"a." + enc([]byte(`{"exp":-5}`)) + ".c", time.Time{}},
		{"a." + enc([]byte(`{"exp":1e300}`)) + ".c", time.Time{}},
		{"a." + enc([]byte(`{"nbf":5}`)) + ".c", time.Time{}},
		{"a." + enc([]byte(`{"exp":1900000000.5}`)) + ".c", at},
	} {
		if got := tokenExpiry(c.token); !got.Equal(c.want) {
			t.Errorf("tokenExpiry(%q) = %v; want %v", c.token, got, c.want)
		}
	}
}
