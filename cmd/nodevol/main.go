// Command nodevol checks and removes pod volume directories on a Kubernetes
// node without ever deleting anything that lives on another mount.
//
//	nodevol check [--json] PATH...
//	nodevol rm [--dry-run] [--json] [--workers N] PATH...
//	nodevol teardown [--dry-run] [--json] VOLUME_DIR...
//	nodevol scan [--json] [--root DIR]
//	nodevol serve [--listen ADDR] [--interval DURATION] [--root DIR] [--host-root DIR]
//	nodevol usage [--json] PATH...
//	nodevol version [--json]
//	nodevol help [COMMAND]
//
// Help asked for ("help", -h, --help) is printed to stdout with exit status
// 0; a usage mistake (no command, an unknown command or flag, which names
// the closest known one) to stderr with exit status 2.
//
// A path with a ".." element is refused by every command.
//
// The demo of the volume manager is a program of its own, nodevol-demo
// (go run ./cmd/nodevol-demo), so that this binary does not link the
// volume manager (reconciler); "nodevol demo" says so and
// exits with status 2.
//
// Exit status: 0 ok, 1 refused or unsafe (for scan: a volume in danger),
// 2 usage or operational error.
//
// The commands are in internal/cli; this is only their main.
package main

import (
	"os"

	"github.com/nodevol/nodevol/internal/cli"
)

func main() { os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr)) }
