// Command nodevol checks and removes pod volume directories on a Kubernetes
// node without ever deleting anything that lives on another mount.
//
//	nodevol check [--json] PATH...
//	nodevol rm [--dry-run] [--json] [--workers N] PATH...
//	nodevol teardown [--dry-run] [--json] VOLUME_DIR...
//	nodevol scan [--json] [--root DIR]
//	nodevol usage [--json] PATH...
//	nodevol demo
//
// A path with a ".." element is refused by every command (refuseDotDot).
//
// Exit status: 0 ok, 1 refused or unsafe, 2 usage or operational error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nodevol/nodevol/mountdetect"
)

// Exit codes. When several paths are given the command exits with the most
// severe code any of them produced.
const (
	exitOK      = 0 // everything was done (or is safe)
	exitRefused = 1 // a path is unsafe, or its removal was refused
	exitError   = 2 // bad usage, or a path could not be examined or removed
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole command: it parses args, writes its report to stdout and
// its diagnostics to stderr, and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeUsage(stderr)
		return exitError
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "check":
		return runCheck(rest, stdout, stderr)
	case "rm":
		return runRm(rest, stdout, stderr)
	case "teardown":
		return runTeardown(rest, stdout, stderr)
	case "usage":
		return runUsage(rest, stdout, stderr)
	case "scan":
		return runScan(rest, stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" && rest[0] != "-h" {
			// "nodevol help rm" is "nodevol rm -h".
			return run([]string{rest[0], "-h"}, stdout, stderr)
		}
		writeUsage(stderr)
		return exitOK
	}
	fmt.Fprintf(stderr, "nodevol: unknown command %q\n\n", cmd)
	writeUsage(stderr)
	return exitError
}

func writeUsage(w io.Writer) {
	fmt.Fprint(w, `nodevol checks and removes pod volume directories without ever deleting
anything that lives on another mount (a NAS, a bind mount, a tmpfs).

Usage:
  nodevol check [--json] PATH...
        For each path: does it exist, is it a mount point, its filesystem,
        emptyDir medium and hugepage size, the mounts nested beneath it, and
        whether "nodevol rm" would remove it without crossing a mount.
  nodevol rm [--dry-run] [--json] [--workers N] PATH...
        Remove each absolute PATH and everything beneath it that is on the
        same mount. If a mount is found beneath it, nothing is deleted.
  nodevol teardown [--dry-run] [--json] VOLUME_DIR...
        Tear down each emptyDir volume directory as the emptyDir plugin does:
        remove a Default volume, unmount and remove a Memory or HugePages
        one, and refuse (changing nothing) when a mount is beneath it.
  nodevol scan [--json] [--root DIR]
        List every pod volume under the kubelet root (default
        /var/lib/kubelet) with its medium, mounts and whether it is safe to
        remove, plus entries that do not parse and leftover pod directories.
  nodevol usage [--json] PATH...
        Bytes and inodes each directory uses, from its project quota when it
        has one, else from a walk that stays on its mount.
  nodevol demo
        Run the volume manager on a temporary kubelet root: pods' emptyDir
        volumes set up and torn down, a teardown refused (and retried) while
        a NAS is mounted inside a volume (as root; without root, a symlink
        to data outside it), and a restart that reconstructs a volume.
  nodevol help [COMMAND]

A path with a ".." element is refused by every command (exit status 2).

Every command sees the mounts of its own mount namespace. In another one
than the host's (a container's), a mount made only on the host is not seen:
check and scan warn, and rm and teardown refuse (exit status 2, nothing
changed) unless given --allow-foreign-mount-namespace. --host-proc DIR names
the host's /proc mounted into a container, to tell.

Exit status: 0 ok, 1 unsafe or refused, 2 usage or operational error.
`)
}

// newFlagSet returns a flag set for a subcommand that reports errors (and
// -h) to stderr instead of exiting.
func newFlagSet(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("nodevol "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: nodevol %s %s\n\n%s\n", name, synopsis, about)
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseArgs parses flags that may appear before, between or after the
// paths: "nodevol rm /vol --dry-run" must be a dry run, not a removal of
// /vol followed by a complaint about a path named "--dry-run". Everything
// after "--" is a path.
//
// It returns the paths, and the exit code to return when it is not -1:
// exitOK after -h (usage was printed), exitError after a bad flag.
func parseArgs(fs *flag.FlagSet, args []string) (paths []string, code int) {
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return nil, exitOK
		case err != nil:
			return nil, exitError // the flag package already said why
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return paths, -1
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(paths, rest...), -1
		}
		paths = append(paths, rest[0])
		args = rest[1:]
	}
}

// usageError reports a usage mistake the flag package cannot see.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return exitError
}

// dotDotReason is why a path with a ".." element is refused.
const dotDotReason = `has a ".." element: after a symlink the kernel and text cleaning disagree on where ".." leads, so what is checked and what is removed could differ; name the path without ".."`

// refuseDotDot is the first thing every command does with a path given on
// the command line: a path with a ".." element anywhere (as given, before
// any cleaning) is refused with an *mountdetect.InvalidPathError, which
// matches mountdetect.ErrInvalidPath, and nothing is looked at. Refusing
// here, for every command alike, means check, rm, rm --dry-run, teardown,
// usage and scan --root can never disagree about which object a path
// names, whatever the library below them does with "..".
func refuseDotDot(path string) error {
	for elem := range strings.SplitSeq(path, "/") {
		if elem == ".." {
			return &mountdetect.InvalidPathError{Path: path, Reason: dotDotReason}
		}
	}
	return nil
}
