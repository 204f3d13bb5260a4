package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/mountdetect"
)

// TestNamespacePolicy: what rm and teardown do, and what every command
// says, for each answer CheckMountNamespace can give.
func TestNamespacePolicy(t *testing.T) {
	self, pid1 := mountdetect.MountNamespaceID{Ino: 4026532176}, mountdetect.MountNamespaceID{Ino: 4026531840}
	host := mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost, By: mountdetect.EvidencePID1, Self: pid1, Host: pid1}
	foreign := mountdetect.MountNamespace{State: mountdetect.MountNamespaceForeign, By: mountdetect.EvidencePID1, Self: self, Host: pid1}
	hidden := mountdetect.MountNamespace{Self: self, Err: fmt.Errorf("%w: open /proc/1/ns/pid: permission denied", mountdetect.ErrPID1Hidden)}
	container := mountdetect.MountNamespace{Self: self, Err: fmt.Errorf("/proc/1/ns/pid is pid:[4026532177]: %w", mountdetect.ErrNotHostInit)}
	noProc := mountdetect.MountNamespace{Err: fmt.Errorf("this process's mount namespace: open /proc/thread-self/ns/mnt: no such file or directory")}
	for _, tc := range []struct {
		name   string
		ns     mountdetect.MountNamespace
		allow  bool
		root   bool // euid 0
		refuse bool
		warn   string // what check warns ("" for nothing); rm, going on unasked, too
		hint   string // in the refusal
	}{
		{name: "host", ns: host},
		{name: "host, allowed", ns: host, allow: true},
		{name: "foreign", ns: foreign, refuse: true, warn: "not the host's mount namespace (this process: mnt:[4026532176]; PID 1: mnt:[4026531840])", hint: "nsenter -t 1 -m"},
		{name: "foreign, allowed", ns: foreign, allow: true, warn: "not the host's mount namespace"},
		{name: "PID 1 hidden: not root", ns: hidden, warn: "cannot tell whether this is the host's mount namespace: PID 1's namespaces are hidden"},
		// Root in a container without CAP_SYS_PTRACE (Docker's default
		// set; hostPID, the kubelet root as a hostPath) on a kernel before
		// 6.18: PID 1's namespaces are hidden (no ptrace access to an init
		// with more capabilities), yet it removes what the kubelet owns, and
		// its rmdir of a directory that is a NAS's mount point only in the
		// host's namespace detaches the NAS on the host. It went on,
		// unasked, as if it were an unprivileged user.
		{name: "PID 1 hidden: root", ns: hidden, root: true, refuse: true, warn: "PID 1's namespaces are hidden", hint: "nsenter -t 1 -m"},
		{name: "PID 1 hidden: root, allowed", ns: hidden, root: true, allow: true, warn: "PID 1's namespaces are hidden"},
		{name: "PID 1 is a container's init", ns: container, refuse: true, warn: "PID 1 is not the host's init", hint: "--host-proc DIR"},
		{name: "PID 1 is a container's init, allowed", ns: container, allow: true, warn: "PID 1 is not the host's init"},
		{name: "no proc", ns: noProc, refuse: true, warn: "no such file or directory", hint: "nsenter -t 1 -m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &namespaceGate{cmd: "rm", flags: &namespaceFlags{allowForeign: tc.allow}, ns: tc.ns, root: tc.root}
			err := g.refusal()
			if (err != nil) != tc.refuse {
				t.Fatalf("refusal() = %v; want refused: %v", err, tc.refuse)
			}
			if err != nil {
				for _, want := range []string{tc.ns.String(), "refusing to change anything", "would detach it on the host", allowForeign, tc.hint} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not say %q", err, want)
					}
				}
				var b bytes.Buffer
				writeNamespaceRefusal(&b, "teardown", err, true)
				if !strings.HasPrefix(b.String(), "nodevol teardown: would refuse: "+tc.ns.String()+"; nothing would be changed\n") {
					t.Errorf("dry-run refusal:\n%s", b.String())
				}
			}
			// check and scan (which have no flag to go on) warn whenever it
			// is not the host's namespace; rm and teardown, when they go on,
			// only when it cannot be told and the flag was not given.
			for _, w := range []struct {
				cmd   string
				flags namespaceFlags
				want  bool
			}{
				{"check", namespaceFlags{}, tc.warn != ""},
				{"rm", namespaceFlags{allowForeign: tc.allow}, tc.warn != "" && !tc.allow},
			} {
				if w.cmd == "rm" && tc.refuse {
					continue // refused: the refusal says it all
				}
				g := &namespaceGate{cmd: w.cmd, flags: &w.flags, ns: tc.ns, root: tc.root}
				var b bytes.Buffer
				g.warn(&b)
				switch {
				case !w.want && b.Len() != 0:
					t.Errorf("%s warns %q; want nothing", w.cmd, b.String())
				case w.want && (!strings.HasPrefix(b.String(), "nodevol "+w.cmd+": warning: ") || !strings.Contains(b.String(), tc.warn) || strings.Count(b.String(), "\n") != 1):
					t.Errorf("%s warns %q; want one line with %q", w.cmd, b.String(), tc.warn)
				}
			}
			if got := g.json(); got.State != tc.ns.State || got.Reason != tc.ns.String() {
				t.Errorf("json() = %+v", got)
			}
		})
	}
}
