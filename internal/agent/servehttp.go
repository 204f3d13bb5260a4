package agent

import (
	"net/http"

	"github.com/nodevol/nodevol/httpserver"
)

// serveHTTP are the limits of serve's HTTP server: httpserver's defaults
// (zero fields). Anything that can reach the agent's pod can connect. Tests
// shorten them.
var serveHTTP httpserver.Limits

// newHTTPServer is serve's HTTP server for h, with the limits of serveHTTP.
func newHTTPServer(h http.Handler) *http.Server { return httpserver.New(h, serveHTTP) }
