// Package reviewapi is a stand-in, over TLS, for the Kubernetes API
// server's two review endpoints that nodevol's secure metrics ask
// (TokenReview and SubjectAccessReview): the token "good" is user prom,
// who may get /metrics; "other" is user other, who may not; any other
// token is not authenticated. It counts the reviews it answers. Tests of
// the servers that review (httpserver, the agent, nodevol-csi) share it,
// so that they check their refusals against the same answers.
package reviewapi

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// Server is the stand-in, serving until the test ends.
type Server struct {
	srv     *httptest.Server
	reviews atomic.Int32
}

// New starts a Server, closed when t ends.
func New(t testing.TB) *Server {
	s := &Server{}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the server's https:// address.
func (s *Server) URL() string { return s.srv.URL }

// Reviews is how many reviews of either kind it has answered.
func (s *Server) Reviews() int32 { return s.reviews.Load() }

// Files writes, in a directory of t's, the server's CA certificate and
// the reviewing client's own token, and returns their paths: what a
// client's --kube-ca-file and --kube-token-file name.
func (s *Server) Files(t testing.TB) (caFile, tokenFile string) {
	t.Helper()
	dir := t.TempDir()
	caFile, tokenFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("reviewer-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tokenFile
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.reviews.Add(1)
	var obj map[string]any
	if err := json.NewDecoder(r.Body).Decode(&obj); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spec, _ := obj["spec"].(map[string]any)
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		users := map[string]string{"good": "prom", "other": "other"}
		if u, ok := users[fmt.Sprint(spec["token"])]; ok {
			obj["status"] = map[string]any{"authenticated": true, "user": map[string]any{"username": u}}
		} else {
			obj["status"] = map[string]any{"authenticated": false, "error": "invalid bearer token"}
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
