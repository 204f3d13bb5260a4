package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nodevol/nodevol/mountdetect"
)

// The namespace gate: what check, scan, rm and teardown do about the mount
// namespace they run in, as mountdetect.CheckMountNamespace tells it.
// A process in another mount namespace than the host's — a debug
// container, a DaemonSet's pod — reads another mount table: a NAS mounted
// only in the host's namespace is not in it, the volume holding it looks
// safe, and removing the directory it is mounted on detaches it on the
// host. What each command does about it:
//
//	the host's namespace              nothing is said
//	another one (foreign)             check, scan: a warning; rm, teardown:
//	                                  refused, exit 2, nothing changed
//	cannot tell: PID 1 is hidden      a warning; rm and teardown go on
//	  from this process, which is
//	  not root
//	cannot tell: PID 1 is hidden      as foreign: root in a container
//	  from this process, which is     without CAP_SYS_PTRACE (the default
//	  root (euid 0)                   set) cannot read PID 1's namespaces,
//	                                  but may remove what the kubelet owns,
//	                                  and rmdir of a directory that is a
//	                                  mount point only in the host's
//	                                  namespace detaches that mount
//	cannot tell, for another reason   as foreign: PID 1 is a container's
//	  (PID 1 is not the host's init,  init (a container has a mount
//	  no /proc)                       namespace of its own), or nothing
//	                                  can be read at all
//
// --allow-foreign-mount-namespace lets rm and teardown go on (quietly) all
// the same; dry runs refuse exactly as the real runs would. Only the
// unprivileged (euid not 0) "cannot tell" goes on unasked: reading another process's
// namespaces takes root, so refusing there would make rm unusable for
// users removing their own test directories, and a process that may not
// read PID 1's namespaces may not unmount anything either, nor remove
// what the kubelet owns.

// allowForeignFlag is the flag that lets rm and teardown go on in a mount
// namespace that is not (or cannot be shown to be) the host's.
const allowForeignFlag = "--allow-foreign-mount-namespace"

// namespaceFlags are the mount namespace flags of a command.
type namespaceFlags struct {
	hostProc     string
	allowForeign bool // rm and teardown only
}

// addNamespaceFlags adds --host-proc and, to commands that change
// something, --allow-foreign-mount-namespace.
func addNamespaceFlags(fs *flag.FlagSet, changes bool) *namespaceFlags {
	f := &namespaceFlags{}
	fs.StringVar(&f.hostProc, "host-proc", "", "the host's /proc mounted into this container at `DIR`, whose PID 1 (the host's init) tells the host's mount namespace (default /proc)")
	if changes {
		fs.BoolVar(&f.allowForeign, allowForeignFlag[2:], false, "go on in a mount namespace that is not (or cannot be shown to be) the host's")
	}
	return f
}

// mountNamespaceJSON is the "mountNamespace" field of every --json result
// of check, rm, teardown and scan.
type mountNamespaceJSON struct {
	State  mountdetect.MountNamespaceState `json:"state"` // "host", "foreign" or "unknown"
	Reason string                          `json:"reason"`
	// HostMountsVisible (scan only): the mounts the host makes under the
	// kubelet root are seen from here — this is the host's namespace, or
	// the root receives them by propagation.
	HostMountsVisible *bool `json:"hostMountsVisible,omitempty"`
}

// namespaceGate is what one run of a command learned about its mount
// namespace, and what it does about it.
type namespaceGate struct {
	cmd   string // "rm", "check", ...
	flags *namespaceFlags
	ns    mountdetect.MountNamespace
	// root: this process runs as euid 0, which may remove what the
	// kubelet owns even when PID 1's namespaces are hidden from it.
	root bool
}

// gate asks which mount namespace this process is in. A --host-proc whose
// PID 1 could not be compared with is an error: it was named to be used.
func (f *namespaceFlags) gate(cmd string) (*namespaceGate, error) {
	var opts []mountdetect.NamespaceOption
	if f.hostProc != "" {
		if err := refuseDotDot(f.hostProc); err != nil {
			return nil, fmt.Errorf("--host-proc: %w", err)
		}
		opts = append(opts, mountdetect.HostProc(f.hostProc))
	}
	g := &namespaceGate{cmd: cmd, flags: f, ns: mountdetect.CheckMountNamespace(opts...), root: os.Geteuid() == 0}
	if f.hostProc != "" && g.ns.By != mountdetect.EvidencePID1 {
		return nil, fmt.Errorf("--host-proc %s: cannot compare with its PID 1: %w", f.hostProc, g.ns.Err)
	}
	return g, nil
}

func (g *namespaceGate) json() mountNamespaceJSON {
	return mountNamespaceJSON{State: g.ns.State, Reason: g.ns.String()}
}

// foreignNamespaceError is why rm and teardown refused to change anything.
type foreignNamespaceError struct {
	NS mountdetect.MountNamespace
}

func (e *foreignNamespaceError) Error() string {
	return e.NS.String() + ": refusing to change anything: " + whyNamespace + "; " + e.hint()
}

// whyNamespace is why rm and teardown refuse in a foreign namespace.
const whyNamespace = "a mount made only in the host's mount namespace (a NAS) is not seen from here, and removing the directory it is mounted on would detach it on the host"

// hint says how to go on.
func (e *foreignNamespaceError) hint() string {
	override := "pass " + allowForeignFlag + " if this namespace sees every mount that matters"
	if errors.Is(e.NS.Err, mountdetect.ErrNotHostInit) {
		return "name the host's /proc, mounted into this container, with --host-proc DIR so that nodevol can tell; run nodevol in the host's mount namespace (nsenter -t 1 -m, with the host's PID namespace); or " + override
	}
	return "run nodevol in the host's mount namespace (nsenter -t 1 -m nodevol ...), or " + override
}

// refusal is the error rm and teardown refuse with, or nil when they may
// go on.
func (g *namespaceGate) refusal() *foreignNamespaceError {
	switch {
	case g.flags.allowForeign, g.ns.State == mountdetect.MountNamespaceHost:
		return nil
	case g.ns.State == mountdetect.MountNamespaceUnknown && errors.Is(g.ns.Err, mountdetect.ErrPID1Hidden) && !g.root:
		// Not root: it may not unmount, nor remove what the kubelet owns.
		// Root with PID 1 hidden is a container's root lacking
		// CAP_SYS_PTRACE (a kernel before 6.18, which cannot tell by the
		// inode): it may, so it is refused like any other unknown.
		return nil
	}
	return &foreignNamespaceError{NS: g.ns}
}

// warn writes one warning line to stderr (the human output) unless this is
// the host's mount namespace or the override flag was given.
func (g *namespaceGate) warn(stderr io.Writer) {
	if g.ns.State == mountdetect.MountNamespaceHost || g.flags.allowForeign {
		return
	}
	what := "a mount made only in the host's mount namespace is not seen from here"
	if g.cmd == "rm" || g.cmd == "teardown" {
		what = "going on, as reading PID 1's namespaces takes root (" + allowForeignFlag + " says go on without this warning)"
	}
	fmt.Fprintf(stderr, "nodevol %s: warning: %s; %s\n", g.cmd, display(g.ns.String()), what)
}

// writeNamespaceRefusal is the human output of a refusal: one block on
// stderr, whatever the number of paths.
func writeNamespaceRefusal(stderr io.Writer, cmd string, err *foreignNamespaceError, dryRun bool) {
	refused, nothing := "refused", "nothing was changed"
	if dryRun {
		refused, nothing = "would refuse", "nothing would be changed"
	}
	fmt.Fprintf(stderr, "nodevol %s: %s: %s; %s\n", cmd, refused, display(err.NS.String()), nothing)
	fmt.Fprintf(stderr, "  %s\n  %s\n", whyNamespace, err.hint())
}

// pathReport is one path's result of a command that changes the node (rm,
// teardown): a pointer to its result struct.
type pathReport[R any] interface {
	*R
	code() int
	setErr(error)
	setNamespace(mountNamespaceJSON)
}

// eachPath is the run loop rm and teardown share once their flags are
// parsed: it asks which mount namespace this is, refuses (every path, or
// one block in words) when a change must not be made from here, and
// otherwise runs act on each path in order, reporting each result as one
// JSON line or in words (human) as it comes. blank is a result for path
// with nothing examined yet. The exit code is the worst result's.
func eachPath[R any, P pathReport[R]](cmd string, nsFlags *namespaceFlags, paths []string, dryRun, asJSON bool,
	stdout, stderr io.Writer, blank, act func(path string) R, human func(stdout, stderr io.Writer, r P)) int {
	ns, err := nsFlags.gate(cmd)
	if err != nil {
		fmt.Fprintf(stderr, "nodevol %s: %s\n", cmd, display(err.Error()))
		return ExitError
	}
	refused := ns.refusal()
	if refused != nil && !asJSON {
		writeNamespaceRefusal(stderr, cmd, refused, dryRun)
		return ExitError
	}
	if !asJSON {
		ns.warn(stderr)
	}
	enc := newJSONEncoder(stdout)
	code := ExitOK
	for _, path := range paths {
		var r R
		if refused != nil {
			r = blank(path)
			P(&r).setErr(refused)
		} else {
			r = act(path)
		}
		P(&r).setNamespace(ns.json())
		code = max(code, P(&r).code())
		if asJSON {
			if err := enc.Encode(&r); err != nil {
				fmt.Fprintf(stderr, "nodevol %s: write report: %v\n", cmd, err)
				return ExitError
			}
			continue
		}
		human(stdout, stderr, &r)
	}
	return code
}
