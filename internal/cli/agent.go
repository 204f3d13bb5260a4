package cli

import (
	"flag"
	"io"
	"runtime/debug"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// What the agent (internal/agent, the nodevol-agent program) uses of the
// CLI: the scan and its verdicts, the flags and usage errors every command
// shares, the mount-namespace gate and the build's version. The agent is a
// program of its own so that nodevol does not link net/http, TLS and
// runtime/metrics, whose package initialisation every command would pay
// at start (docs/benchmarks.md); it shares this code rather than a copy,
// so that "nodevol scan" and the agent's scans cannot drift apart.

// ServeSynopsis is the agent's flags, as the usage lists them for "nodevol
// serve" and for nodevol-agent.
const ServeSynopsis = "[--listen ADDR] [--interval DURATION] [--root DIR] [--host-root DIR]"

// The scan's report and verdicts, as "nodevol scan" makes them.
type (
	ScanReport  = scanReport
	ScanVolume  = scanVolume
	ScanProblem = scanProblem
	Verdict     = scanVerdict
	ReasonCode  = reasonCode
)

// The verdicts, and the reason codes the agent's tests use.
const (
	VerdictOK         = verdictOK
	VerdictInUse      = verdictInUse
	VerdictDanger     = verdictDanger
	VerdictUnknown    = verdictUnknown
	VerdictError      = verdictError
	ReasonNotMounted  = reasonNotMounted
	ReasonNestedMount = reasonNestedMount
)

// NewScanReport is a report of root with these volumes and problems, as a
// scan would make it (for the agent's tests of what it does with one).
func NewScanReport(root string, volumes []*ScanVolume, problems []ScanProblem) *ScanReport {
	return &scanReport{root: root, volumes: volumes, problems: problems}
}

// Volumes are the volumes the scan found.
func (s *scanReport) Volumes() []*ScanVolume { return s.volumes }

// Problems are the entries that do not parse or could not be read.
func (s *scanReport) Problems() []ScanProblem { return s.problems }

// Leftovers is how many leftover pod directories the scan found.
func (s *scanReport) Leftovers() int { return len(s.leftovers) }

// OverBudget is how many pods a bound stopped the scan in.
func (s *scanReport) OverBudget() int { return len(s.overBudget) }

// Incomplete says a bound stopped the scan somewhere: what is past it was
// not examined.
func (s *scanReport) Incomplete() bool { return s.incomplete }

// ScanRoot scans root as "nodevol scan --root" does.
func ScanRoot(root string) (*ScanReport, error) { return scanRoot(root) }

// ScanRootWithin scans root within limits (the agent's tests of an
// incomplete scan).
func ScanRootWithin(root string, limits volume.ScanLimits, opts ...emptydir.Option) (*ScanReport, error) {
	return scanRootWithin(root, limits, opts...)
}

// ScanOptionsFrom are the emptyDir options of a scan from the mount
// namespace ns.
func ScanOptionsFrom(ns mountdetect.MountNamespace) []emptydir.Option { return scanOptionsFrom(ns) }

// NewServeScan is the agent's scan: the verdicts of a whole scan, kept
// between scans, each re-examining only what a change can have affected
// and every pod again at least every fullEvery (on Linux; elsewhere a
// whole scan each time).
func NewServeScan(clk clock.PassiveClock, fullEvery, stampEvery time.Duration, opts ...emptydir.Option) func(string) (*ScanReport, error) {
	return newServeScan(clk, fullEvery, stampEvery, opts...)
}

// DefaultFullEvery is how many intervals pass at most between two scans
// of the whole root; the scans between them re-examine only the pods a
// mount change or a change of their directories can have affected
// (incrementalScan). At 10 s, a whole scan every 5 minutes: on a node of
// 10,000 volumes it costs about as much CPU as the checks of the 29
// scans between (docs/benchmarks.md).
const DefaultFullEvery = defaultFullEvery

// defaultFullEvery is DefaultFullEvery, as the scan benchmarks name it.
const defaultFullEvery = 30

// RootVisibility is whether mounts the host makes under the kubelet root
// are seen from this process.
type RootVisibility = rootVisibility

// CheckRootVisibility tells it for root (as this process names it) in the
// namespace ns; propagationOf is mountdetect.PropagationOf but for tests.
func CheckRootVisibility(ns mountdetect.MountNamespace, root string, propagationOf func(string) (mountdetect.Propagation, error)) RootVisibility {
	return checkRootVisibility(ns, root, propagationOf)
}

// Visible says the host's mounts under the root are seen.
func (r rootVisibility) Visible() bool { return r.visible }

// Why says why, or why not.
func (r rootVisibility) Why() string { return r.why }

// Err is why the propagation could not be read (the root missing, say).
func (r rootVisibility) Err() error { return r.err }

// VersionInfo is the build, as "nodevol version" reports it.
type VersionInfo = versionInfo

// NewVersionInfo reads it from bi (debug.ReadBuildInfo's result).
func NewVersionInfo(bi *debug.BuildInfo, ok bool) VersionInfo { return newVersionInfo(bi, ok) }

// FlagSet is a command's flags, with the CLI's help and usage errors.
type FlagSet = flagSet

// NewProgramFlagSet is the flag set of a program of its own (name, as it
// is run), still without flags: help asked for goes to stdout, a mistake
// to stderr, in the words of nodevol's commands.
func NewProgramFlagSet(name, synopsis, help string, stdout, stderr io.Writer) *FlagSet {
	return newFlagSet(&command{name: name, synopsis: synopsis, help: help, program: true}, stdout, stderr)
}

// ParseArgs parses flags that may come before, between or after the
// arguments; a code >= 0 is the exit code to return (the help was
// printed, or the mistake said).
func ParseArgs(fs *FlagSet, args []string) (rest []string, code int) { return parseArgs(fs, args) }

// UsageError says a usage mistake on stderr, with the synopsis and where
// the help is, and returns ExitError.
func UsageError(fs *FlagSet, stderr io.Writer, format string, a ...any) int {
	return usageError(fs, stderr, format, a...)
}

// Display is s made safe to print: control and invalid characters quoted.
func Display(s string) string { return display(s) }

// RefuseDotDot refuses a path with a ".." element, as every command does.
func RefuseDotDot(path string) error { return refuseDotDot(path) }

// NamespaceFlags are --host-proc (and, for commands that change something,
// --allow-foreign-mount-namespace).
type NamespaceFlags = namespaceFlags

// AddNamespaceFlags adds them to fs.
func AddNamespaceFlags(fs *flag.FlagSet, changes bool) *NamespaceFlags {
	return addNamespaceFlags(fs, changes)
}

// Namespace asks which mount namespace this process is in, for the
// command cmd; a --host-proc whose PID 1 could not be compared with is an
// error.
func (f *namespaceFlags) Namespace(cmd string) (mountdetect.MountNamespace, error) {
	g, err := f.gate(cmd)
	if err != nil {
		return mountdetect.MountNamespace{}, err
	}
	return g.ns, nil
}
