// Package httpserver makes the HTTP server nodevol's agents run — nodevol
// serve and nodevol-csi, for /metrics, /healthz and /readyz — with a time
// limit on every connection, request and response, and a size limit on
// request headers.
//
// A server from [New] takes no authentication: anything that can reach
// the pod (or the node, with hostNetwork) can connect. [NewSecure] serves
// over TLS and lets through only the clients the Kubernetes API server
// authenticates and authorises (package kubeauth): the agents serve
// /metrics with it, which names the kubelet root and what is wrong with
// the node's volumes. net/http's zero
// http.Server waits for ever: for a request
// header, for a request body sent one byte a second, for a client that
// reads no response, and for the next request on an idle keep-alive
// connection. Each waiting connection holds a goroutine, buffers and a
// descriptor, and they pile up until the agent runs out of descriptors or
// memory. [New] gives every one of those waits a limit.
//
// What it does not cover: the number of connections open at once (each is
// bounded in time, not in number: a NetworkPolicy that admits only the
// scraper is the place for that).
package httpserver

import (
	"net/http"
	"time"
)

// Limits bound what a client may make the server wait for and read. A
// zero field takes its default; no limit can be switched off.
type Limits struct {
	// ReadHeaderTimeout bounds the reading of a request's header
	// (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included
	// (default 30s).
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of a response, from the end of the
	// request's header (default 30s).
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a keep-alive
	// connection (default 2m: longer than any sane scrape interval, so
	// that Prometheus keeps its connection).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (default 16 KiB: the
	// endpoints take no parameters).
	MaxHeaderBytes int
}

// defaults are the limits a zero field of Limits takes.
var defaults = Limits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       30 * time.Second,
	WriteTimeout:      30 * time.Second,
	IdleTimeout:       2 * time.Minute,
	MaxHeaderBytes:    16 << 10,
}

// withDefaults is l with every zero (or negative) field set to its default.
func (l Limits) withDefaults() Limits {
	pick := func(v, d time.Duration) time.Duration {
		if v <= 0 {
			return d
		}
		return v
	}
	l.ReadHeaderTimeout = pick(l.ReadHeaderTimeout, defaults.ReadHeaderTimeout)
	l.ReadTimeout = pick(l.ReadTimeout, defaults.ReadTimeout)
	l.WriteTimeout = pick(l.WriteTimeout, defaults.WriteTimeout)
	l.IdleTimeout = pick(l.IdleTimeout, defaults.IdleTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = defaults.MaxHeaderBytes
	}
	return l
}

// New returns a server for h with the limits l (the zero Limits: the
// defaults). The caller serves it (Serve on its listener) and stops it
// (Shutdown or Close).
func New(h http.Handler, l Limits) *http.Server {
	l = l.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}
