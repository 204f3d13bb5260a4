// Package privatens runs a program again inside a new, private mount
// namespace, so that whatever it mounts (and forgets to unmount) vanishes
// with it and never reaches the host. The test helpers and nodevol-demo
// both use it.
package privatens

import (
	"errors"
	"os"
)

// ErrNotRoot is returned when the caller cannot create a mount namespace.
var ErrNotRoot = errors.New("creating a mount namespace needs root (CAP_SYS_ADMIN)")

// Child reports whether this process was started by Reexec with the same
// envName and really runs in a mount namespace other than its parent's. A
// stray, inherited or hand-set variable can never make it true on the
// host: the variable must name the parent process's real namespace (read
// from /proc/<ppid>/ns/mnt), and this process must be in another one.
func Child(envName string) bool { return child(envName) }

// Reexec runs /proc/self/exe with args in a new mount namespace whose
// mounts are private, wires its standard streams to the given ones, waits
// for it, and returns its exit code (128+signal when a signal killed it, as
// shells report it). envName
// tells the child it is one (see Child). err is set only when the child
// could not be started at all; the caller then runs without mounting.
func Reexec(envName string, args []string, streams Streams) (code int, err error) {
	return reexec(envName, args, streams)
}

// Streams are the child's standard streams (nil: none), and what else it
// gets from its parent.
type Streams struct {
	Stdin          any // io.Reader; any so callers can pass *os.File or nil
	Stdout, Stderr any // io.Writer
	// Env is added to the child's environment ("KEY=value"; it wins over
	// the parent's own value of KEY).
	Env []string
	// Signals, when not nil, are passed on to the child as they arrive,
	// until it exits. A parent that catches SIGINT and SIGTERM
	// (signal.Notify), rather than die of them and take the child with it
	// (the child is killed when its parent dies), passes them here, so the
	// child can clean up and exit on its own.
	Signals <-chan os.Signal
}
