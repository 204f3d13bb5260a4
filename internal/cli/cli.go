// Package cli is the nodevol command: its command table, argument
// handling and every command but the demo, which is a program of its own
// (cmd/nodevol-demo) so that the operator's binary does not link the
// volume manager (reconciler). cmd/nodevol is a thin main
// around Run; the demo runs Run for the "nodevol scan" steps it shows.
//
// The commands are listed, and the exit statuses said, in cmd/nodevol's
// package documentation (TestPackageDocLists keeps it equal to the table).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/nodevol/nodevol/mountdetect"
)

// Exit codes. When several paths are given the command exits with the most
// severe code any of them produced.
const (
	ExitOK      = 0 // everything was done (or is safe)
	ExitRefused = 1 // a path is unsafe, or its removal was refused
	ExitError   = 2 // bad usage, or a path could not be examined or removed
)

// exitCode is the code one path's result calls for: ExitError when it
// failed, else ExitRefused when it is unsafe or was refused, else ExitOK.
func exitCode(err error, refused bool) int {
	switch {
	case err != nil:
		return ExitError
	case refused:
		return ExitRefused
	}
	return ExitOK
}

// Run is the nodevol command run with args (os.Args[1:]): it writes its
// report to stdout and its diagnostics to stderr, and returns the exit
// code.
func Run(args []string, stdout, stderr io.Writer) int { return run(args, stdout, stderr) }

// command is one subcommand, as Go's cmd/go has them: everything the CLI
// says about it (the package documentation, the usage, its help, its usage
// errors) and its dispatch come from here, so no usage text is written
// twice.
type command struct {
	name     string
	synopsis string // what follows "nodevol NAME" in its usage line
	short    string // its lines in the usage, one command per line pair
	help     string // its help, after the usage line, before the flags
	// run declares the command's flags on fs, parses args with parseArgs
	// and runs the command. Nil for help, which run dispatches itself.
	run func(fs *flagSet, args []string, stdout, stderr io.Writer) int
	// program is set for a Program: name is then a program's, run as it
	// is (nodevol-demo), not a command of nodevol.
	program bool
}

// fullName is "nodevol NAME", or a program's NAME.
func (c *command) fullName() string {
	if c.program {
		return c.name
	}
	return "nodevol " + c.name
}

// usageLine is "nodevol NAME SYNOPSIS".
func (c *command) usageLine() string {
	return strings.TrimSpace(c.fullName() + " " + c.synopsis)
}

// helpCommand is how its help is asked for.
func (c *command) helpCommand() string {
	if c.program {
		return c.name + " -h"
	}
	return "nodevol help " + c.name
}

// Program is a program of its own that takes no arguments (nodevol-demo),
// whose help and usage mistakes are handled as the commands' are, so that
// its usage text is not written a second time.
type Program struct {
	Name string // as it is run: "nodevol-demo"
	Help string // its help, after its usage line
	// Run runs it once its arguments were found right.
	Run func(stdout, stderr io.Writer) int
}

// Main runs p with args (os.Args[1:]) and returns the exit code. Help asked
// for (-h, --help) is printed to stdout, exit 0; a flag or an argument is a
// usage mistake, said on stderr, exit 2.
func (p Program) Main(args []string, stdout, stderr io.Writer) int {
	c := &command{name: p.Name, help: p.Help, program: true}
	fs := newFlagSet(c, stdout, stderr)
	extra, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(extra) > 0 {
		return usageError(fs, stderr, "%s takes no arguments (got %q)", p.Name, extra[0])
	}
	return p.Run(stdout, stderr)
}

// commands are the subcommands, in the order the usage lists them.
func commands() []command {
	return []command{
		{name: "check", synopsis: "[--json] PATH...", help: checkHelp, run: runCheck,
			short: `For each path: does it exist, is it a mount point, its filesystem,
emptyDir medium and hugepage size, the mounts nested beneath it, and
whether "nodevol rm" would remove it without crossing a mount.`},
		{name: "rm", synopsis: "[--dry-run] [--json] [--workers N] PATH...", help: rmHelp, run: runRm,
			short: `Remove each absolute PATH and everything beneath it that is on the
same mount. If a mount is found beneath it, nothing is deleted.`},
		{name: "teardown", synopsis: "[--dry-run] [--json] VOLUME_DIR...", help: teardownHelp, run: runTeardown,
			short: `Tear down each emptyDir volume directory as the emptyDir plugin does:
remove a Default volume, unmount and remove a Memory or HugePages
one, and refuse (changing nothing) when a mount is beneath it.`},
		{name: "scan", synopsis: "[--json] [--root DIR]", help: scanHelp, run: runScan,
			short: `List every pod volume under the kubelet root (default
/var/lib/kubelet) with its medium, mounts and verdict (ok, in-use,
danger, unknown, error), plus entries that do not parse and leftover
pod directories. Exits 1 only for danger (and unknown, unparsable).`},
		{name: "serve", synopsis: ServeSynopsis, help: serveHelp, run: runServe,
			short: `Run the node agent, nodevol-agent (installed beside nodevol): scan the
kubelet root every interval and when the mount table changes, and serve
the verdicts as Prometheus metrics on /metrics, with /healthz and
/readyz. Read-only: it never unmounts or removes anything.`},
		{name: "usage", synopsis: "[--json] PATH...", help: usageHelp, run: runUsage,
			short: `Bytes and inodes each directory uses, from its project quota when it
has one, else from a walk that stays on its mount.`},
		{name: "version", synopsis: "[--json]", help: versionHelp, run: runVersion,
			short: `nodevol's version and build, Go, the platform, the kernel release
and whether this machine has each kernel feature nodevol uses.`},
		{name: "help", synopsis: "[COMMAND]",
			short: `This text, or a command's own help.`},
	}
}

// run is the whole command: it parses args, writes its report to stdout and
// its diagnostics to stderr, and returns the exit code.
//
// Help that was asked for (help, -h, --help, help COMMAND, COMMAND -h) is
// the command's output: stdout, exit 0. A mistake (no command, an unknown
// one, a bad flag) is a diagnostic: stderr, exit 2.
func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		writeUsage(stderr, cmds)
		return ExitError
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" && rest[0] != "-h" {
			// "nodevol help rm" is "nodevol rm -h".
			return run([]string{rest[0], "-h"}, stdout, stderr)
		}
		writeUsage(stdout, cmds)
		return ExitOK
	}
	names := []string{"help"}
	for _, c := range cmds {
		if c.name == name && c.run != nil {
			return c.run(newFlagSet(&c, stdout, stderr), rest, stdout, stderr)
		}
		if c.run != nil {
			names = append(names, c.name)
		}
	}
	if name == "demo" {
		fmt.Fprint(stderr, demoMoved)
		return ExitError
	}
	fmt.Fprintf(stderr, "nodevol: unknown command %q%s\nRun \"nodevol help\" for usage.\n", display(name), didYouMean(name, names, `"`, `"`))
	return ExitError
}

// demoMoved is what "nodevol demo" says (exit status 2): the demo was a
// command until it became a program of its own, and whoever still types
// it is told where it went rather than that it never existed.
const demoMoved = `nodevol: the demo is not part of nodevol: it is its own program, so that
nodevol does not link the volume manager. In nodevol's
source tree run:
	go run ./cmd/nodevol-demo
`

// writeUsage prints the top-level usage: every command's usage line and
// short description, between what is true of all of them.
func writeUsage(w io.Writer, cmds []command) {
	fmt.Fprint(w, `nodevol checks and removes pod volume directories without ever deleting
anything that lives on another mount (a NAS, a bind mount, a tmpfs).

Usage:
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %s\n", c.usageLine())
		for line := range strings.Lines(c.short) {
			fmt.Fprintf(w, "        %s", line)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, `
A path with a ".." element is refused by every command (exit status 2).

Every command sees the mounts of its own mount namespace. In another one
than the host's (a container's), a mount made only on the host is not seen:
check and scan warn, and rm and teardown refuse (exit status 2, nothing
changed) unless given --allow-foreign-mount-namespace. --host-proc DIR names
the host's /proc mounted into a container, to tell.

Exit status: 0 ok, 1 unsafe or refused, 2 usage or operational error.
`)
}

// docSynopses is the list of usage lines in the package documentation
// (TestPackageDocLists keeps it equal to the table's).
func docSynopses(cmds []command) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "//\t%s\n", c.usageLine())
	}
	return b.String()
}

// flagSet is a subcommand's flags and its help. Help asked for (-h) goes
// to stdout; a mistake goes to stderr as one line saying what is wrong,
// then the synopsis and where the help is.
type flagSet struct {
	*flag.FlagSet
	cmd            *command
	stdout, stderr io.Writer
}

// newFlagSet returns the flag set of cmd, still without flags: its run
// function declares them. The flag package prints nothing itself:
// parseArgs and usageError do, in the CLI's terms.
func newFlagSet(cmd *command, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(cmd.fullName(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, cmd: cmd, stdout: stdout, stderr: stderr}
}

// usageLine is "Usage: nodevol NAME SYNOPSIS".
func (fs *flagSet) usageLine() string { return "Usage: " + fs.cmd.usageLine() }

// writeHelp prints the whole help: synopsis, description and flags. The
// flag package lists each flag as "-name"; the synopsis, the help texts
// and every message write "--name" (both are accepted), so the list does
// too.
func (fs *flagSet) writeHelp(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n%s\n", fs.usageLine(), fs.cmd.help)
	var defaults strings.Builder
	fs.SetOutput(&defaults)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if defaults.Len() == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	for line := range strings.Lines(defaults.String()) {
		if name, ok := strings.CutPrefix(line, "  -"); ok {
			line = "  --" + name
		}
		fmt.Fprint(w, line)
	}
}

// parseArgs parses flags that may appear before, between or after the
// paths: "nodevol rm /vol --dry-run" must be a dry run, not a removal of
// /vol followed by a complaint about a path named "--dry-run". Everything
// after "--" is a path.
//
// It returns the paths, and the exit code to return when it is not -1:
// ExitOK after -h (the help was printed to stdout), ExitError after a bad
// flag (said on stderr, with the closest flag when one is close).
func parseArgs(fs *flagSet, args []string) (paths []string, code int) {
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			fs.writeHelp(fs.stdout)
			return nil, ExitOK
		case err != nil:
			return nil, usageError(fs, fs.stderr, "%s", fs.flagError(err))
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

// flagError says what the flag package found wrong, in the CLI's terms:
// flags written with two dashes, as the help writes them, and an unknown
// flag with the closest known one ("unknown flag --dryrun (did you mean
// --dry-run?)"). The flag package's errors have no type, only these
// messages, whose form TestFlagErrors pins.
func (fs *flagSet) flagError(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		names := []string{"help"}
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return "unknown flag --" + display(name) + didYouMean(name, names, "--", "")
	}
	for _, dash := range []string{"flag needs an argument: -", "for flag -", "for -"} {
		if i := strings.Index(msg, dash); i >= 0 {
			return display(msg[:i+len(dash)] + "-" + msg[i+len(dash):])
		}
	}
	return display(msg)
}

// usageError reports a usage mistake: what is wrong, the synopsis and
// where the help is, on stderr. It returns ExitError.
func usageError(fs *flagSet, stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n%s\nRun \"%s\" for details.\n", fs.Name(), fmt.Sprintf(format, a...), fs.usageLine(), fs.cmd.helpCommand())
	return ExitError
}

// didYouMean is " (did you mean X?)" with the candidates closest to typed,
// each between before and after, or "" when none is close: within an edit
// distance (a transposition counts as one edit) of a third of its length,
// at most 2, or a prefix of exactly one candidate at least two characters
// long ("--work" for "--workers").
func didYouMean(typed string, candidates []string, before, after string) string {
	typed = strings.ToLower(typed)
	var best []string
	bestDist := -1
	var prefixed []string
	for _, c := range candidates {
		if len(typed) >= 2 && strings.HasPrefix(c, typed) {
			prefixed = append(prefixed, c)
		}
		d := editDistance(typed, c)
		if d > min(2, max(1, len(c)/3)) || (bestDist >= 0 && d > bestDist) {
			continue
		}
		if d != bestDist {
			best, bestDist = nil, d
		}
		best = append(best, c)
	}
	if len(best) == 0 && len(prefixed) == 1 {
		best = prefixed
	}
	if len(best) == 0 {
		return ""
	}
	quoted := make([]string, len(best))
	for i, c := range best {
		quoted[i] = before + c + after
	}
	return " (did you mean " + strings.Join(quoted, " or ") + "?)"
}

// editDistance is the optimal string alignment distance between a and b:
// how many insertions, deletions, substitutions and transpositions of two
// adjacent bytes turn one into the other ("dryrun" → "dry-run" is 1,
// "jsno" → "json" is 1).
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// dotDotReason is why a path with a ".." element is refused.
const dotDotReason = `has a ".." element: after a symlink the kernel and text cleaning disagree on where ".." leads, so the path could name another object than it seems to; name the path without ".."`

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
