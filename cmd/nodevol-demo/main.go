// Command nodevol-demo runs the volume manager (reconciler.Manager) with
// the emptyDir plugin on a throwaway kubelet root, in about a second, and
// checks the promises nodevol makes as it goes: a teardown refused (and
// retried) while a "NAS" is mounted inside a volume, the NAS's data
// intact, a restart that reconstructs a volume, and nothing left behind.
// From nodevol's source tree, with no set-up:
//
//	go run ./cmd/nodevol-demo
//
// It is a program of its own rather than a command of nodevol so that the
// operator's binary does not link the volume manager;
// "nodevol demo" names this program and exits with status 2. The steps it
// shows as "nodevol scan" run nodevol's own scan (internal/cli).
//
// As root it re-executes itself (/proc/self/exe) in a private mount
// namespace (internal/base/privatens), so no mount it makes can reach the host.
// "nodevol-demo -h" prints what it does; it takes no arguments.
//
// Exit status: 0 every promise held, 2 one was broken (or the sandbox
// could not be built or removed), 130 or 143 interrupted by SIGINT or
// SIGTERM and cleaned up, 141 stopped by SIGPIPE (its output closed, as in
// "nodevol-demo | head -1") and cleaned up.
package main

import (
	"io"
	"os"

	"github.com/nodevol/nodevol/internal/cli"
)

// Exit codes, nodevol's.
const (
	exitOK      = cli.ExitOK
	exitRefused = cli.ExitRefused
	exitError   = cli.ExitError
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole program: it checks args (there are none), runs the
// demo, and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return cli.Program{Name: "nodevol-demo", Help: demoHelp, Run: runDemo}.Main(args, stdout, stderr)
}
