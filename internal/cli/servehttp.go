package cli

import (
	"net/http"
	"time"
)

// serveHTTP are the limits of serve's HTTP server. The agent listens on
// the node's network (a DaemonSet with hostNetwork), where anything that
// can reach the node can connect: no connection may stay open, and no
// request be read or answered, without a time limit, or idle keep-alive
// connections (each a goroutine, buffers and a descriptor) pile up until
// the agent runs out of descriptors or memory. Tests shorten them.
var serveHTTP = struct {
	readHeaderTimeout, readTimeout, writeTimeout, idleTimeout time.Duration
	maxHeaderBytes                                            int
}{
	readHeaderTimeout: 10 * time.Second,
	readTimeout:       30 * time.Second,
	writeTimeout:      30 * time.Second,
	// Longer than any sane scrape interval, so that Prometheus keeps
	// its connection.
	idleTimeout:    2 * time.Minute,
	maxHeaderBytes: 16 << 10, // the endpoints take no parameters
}

// newHTTPServer is serve's HTTP server for h, with the limits of serveHTTP.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: serveHTTP.readHeaderTimeout,
		ReadTimeout:       serveHTTP.readTimeout,
		WriteTimeout:      serveHTTP.writeTimeout,
		IdleTimeout:       serveHTTP.idleTimeout,
		MaxHeaderBytes:    serveHTTP.maxHeaderBytes,
	}
}
