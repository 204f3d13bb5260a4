// Command nodevol-agent is nodevol's node agent: it scans the kubelet root
// (as "nodevol scan" does) every interval and when the mount table
// changes, and serves the verdicts as Prometheus metrics, with /healthz
// and /readyz. It only reads: it never unmounts or removes anything.
//
//	nodevol-agent [--listen ADDR] [--interval DURATION] [--root DIR] [--host-root DIR]
//
// "nodevol serve ARGS" runs it, from the directory nodevol is in, with the
// same arguments. It is a program of its own so that nodevol, the CLI,
// does not link net/http, TLS and runtime/metrics, whose initialisation
// every command would pay at start (docs/benchmarks.md).
//
// Exit status: 0 after SIGTERM or SIGINT, 2 on bad usage or when it cannot
// listen.
//
// The agent is in internal/agent; this is only its main.
package main

import (
	"os"

	"github.com/nodevol/nodevol/internal/agent"
)

func main() { os.Exit(agent.Main(os.Args[1:], os.Stdout, os.Stderr)) }
