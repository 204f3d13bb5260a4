package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
)

// TestMain runs the tests in a private mount namespace when root, so the
// mounts they make cannot leak. The end-to-end tests build the binary in
// TestCLI rather than here: mounttest.Main ends the process itself, which
// would leave no place to remove the binary afterwards.
func TestMain(m *testing.M) { mounttest.Main(m) }

// allowForeign is passed to every rm and teardown these tests run to
// remove something: as root they run in the private mount namespace
// mounttest.Main creates, which is not the host's, and there rm and
// teardown refuse without it (nsgate_linux_test.go tests that refusal).
const allowForeign = "--allow-foreign-mount-namespace"

// namespaceWarning is the line check and scan print on stderr in this
// process's mount namespace: nothing in the host's, a warning in the
// private one mounttest.Main creates as root.
func namespaceWarning(cmd string) string {
	ns := mountdetect.CheckMountNamespace()
	if ns.State == mountdetect.MountNamespaceHost {
		return ""
	}
	return "nodevol " + cmd + ": warning: " + ns.String() + "; a mount made only in the host's mount namespace is not seen from here\n"
}

// scanNamespaceLine is the line scan prints on stderr about the root in
// this process's mount namespace: nothing in the host's; in another, a
// note when the root receives the host's mounts by propagation, else a
// warning that says what to change.
func scanNamespaceLine(t *testing.T, root string) string {
	t.Helper()
	ns := mountdetect.CheckMountNamespace()
	if ns.State == mountdetect.MountNamespaceHost {
		return ""
	}
	p, err := mountdetect.PropagationOf(root)
	if err != nil {
		t.Fatal(err)
	}
	if p.Receives() {
		return "nodevol scan: note: " + ns.String() + ", but " + root + " is on a mount that receives the host's mounts (" + p.String() + " at " + p.MountPoint + "; mountPropagation HostToContainer or Bidirectional)\n"
	}
	return "nodevol scan: warning: " + ns.String() + ", and " + root + " is on a " + p.String() + " mount (at " + p.MountPoint + "): a mount the host makes under it after this process started is not seen here; give the hostPath mountPropagation: HostToContainer\n"
}

// hugePages2Mi is where the kernel shows its 2 MiB huge pages, when it has
// them: a HugePages-2Mi emptyDir volume can be set up only then.
const hugePages2Mi = "/sys/kernel/mm/hugepages/hugepages-2048kB"

// result is what one invocation of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// nodevol calls run in this process, the way main does.
func nodevol(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	t.Logf("nodevol %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	return r
}

func (r result) wantCode(t *testing.T, want int) {
	t.Helper()
	if r.code != want {
		t.Errorf("exit code %d, want %d", r.code, want)
	}
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	clitest.WantContains(t, what, got, wants...)
}

// jsonLines decodes one JSON object per line and checks that each has
// exactly the wanted keys.
func jsonLines(t *testing.T, out string, keys ...string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for line := range strings.Lines(out) {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		var got []string
		for k := range raw {
			got = append(got, k)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Errorf("JSON keys %v, want %v in %s", got, want, line)
		}
		if nm, ok := raw["nestedMounts"]; ok && string(nm) == "null" {
			t.Errorf("nestedMounts is null, want a list in %s", line)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// withError is the --json keys of a failed result: keys, plus "error"
// and "errors" (and "moreErrors" only when the library counted failures
// it did not list).
func withError(keys []string) []string {
	return append(slices.Clip(keys), "error", "errors")
}

// Help that was asked for is output: stdout, exit 0. A usage mistake is a
// diagnostic: stderr, exit 2, and nothing on stdout.
func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		code      int
		stdoutHas string // help asked for: on stdout, nothing on stderr
		stderrHas string // a mistake: on stderr, nothing on stdout
	}{
		{args: nil, code: ExitError, stderrHas: "Usage:\n  nodevol check"},
		{args: []string{"help"}, code: ExitOK, stdoutHas: "Usage:\n  nodevol check"},
		{args: []string{"-h"}, code: ExitOK, stdoutHas: "Usage:\n  nodevol check"},
		{args: []string{"--help"}, code: ExitOK, stdoutHas: "Usage:\n  nodevol check"},
		{args: []string{"help", "help"}, code: ExitOK, stdoutHas: "Usage:\n  nodevol check"},
		{args: []string{"help", "rm"}, code: ExitOK, stdoutHas: "Usage: nodevol rm [--dry-run] [--json] [--workers N] PATH...\n\nRemove each"},
		{args: []string{"help", "nosuch"}, code: ExitError, stderrHas: `nodevol: unknown command "nosuch"` + "\nRun \"nodevol help\" for usage.\n"},
		{args: []string{"nosuch"}, code: ExitError, stderrHas: `unknown command "nosuch"` + "\n"},
		{args: []string{"chekc", "/"}, code: ExitError, stderrHas: `nodevol: unknown command "chekc" (did you mean "check"?)` + "\n"},
		{args: []string{"teardwon"}, code: ExitError, stderrHas: `unknown command "teardwon" (did you mean "teardown"?)`},
		{args: []string{"hlep"}, code: ExitError, stderrHas: `unknown command "hlep" (did you mean "help"?)`},
		{args: []string{"check"}, code: ExitError, stderrHas: "nodevol check: no PATH given\nUsage: nodevol check [--json] PATH...\nRun \"nodevol help check\" for details.\n"},
		{args: []string{"check", "-h"}, code: ExitOK, stdoutHas: "Usage: nodevol check"},
		{args: []string{"check", "--help"}, code: ExitOK, stdoutHas: "Usage: nodevol check"},
		{args: []string{"check", "--nosuch", "/"}, code: ExitError, stderrHas: "nodevol check: unknown flag --nosuch\n"},
		{args: []string{"check", "--jsno", "/"}, code: ExitError, stderrHas: "nodevol check: unknown flag --jsno (did you mean --json?)\n"},
		{args: []string{"rm"}, code: ExitError, stderrHas: "no PATH given"},
		{args: []string{"rm", "--dry-run"}, code: ExitError, stderrHas: "no PATH given"},
		{args: []string{"rm", "--dryrun", "x"}, code: ExitError, stderrHas: "nodevol rm: unknown flag --dryrun (did you mean --dry-run?)\nUsage: nodevol rm [--dry-run]"},
		{args: []string{"rm", "-dryrun=true", "x"}, code: ExitError, stderrHas: "nodevol rm: unknown flag --dryrun (did you mean --dry-run?)\n"},
		{args: []string{"rm", "--work", "2", "x"}, code: ExitError, stderrHas: "nodevol rm: unknown flag --work (did you mean --workers?)\n"},
		{args: []string{"rm", "--hepl"}, code: ExitError, stderrHas: "nodevol rm: unknown flag --hepl (did you mean --help?)\n"},
		{args: []string{"rm", "--workers", "0", "/nonexistent/x"}, code: ExitError, stderrHas: "--workers must be at least 1"},
		{args: []string{"rm", "--workers=-3", "/nonexistent/x"}, code: ExitError, stderrHas: "--workers must be at least 1"},
		{args: []string{"rm", "--workers", "many", "/nonexistent/x"}, code: ExitError, stderrHas: `nodevol rm: invalid value "many" for flag --workers: parse error` + "\n"},
		{args: []string{"rm", "--dry-run=maybe", "/nonexistent/x"}, code: ExitError, stderrHas: `nodevol rm: invalid boolean value "maybe" for --dry-run: parse error` + "\n"},
		{args: []string{"rm", "/nonexistent/x", "--nosuch"}, code: ExitError, stderrHas: "nodevol rm: unknown flag --nosuch\n"},
		{args: []string{"rm", "---x", "/nonexistent/x"}, code: ExitError, stderrHas: "nodevol rm: bad flag syntax: ---x\n"},
		{args: []string{"help", "teardown"}, code: ExitOK, stdoutHas: "Usage: nodevol teardown"},
		{args: []string{"help", "scan"}, code: ExitOK, stdoutHas: "Usage: nodevol scan"},
		{args: []string{"teardown"}, code: ExitError, stderrHas: "no VOLUME_DIR given"},
		{args: []string{"teardown", "--dry-run", "--json"}, code: ExitError, stderrHas: "no VOLUME_DIR given"},
		{args: []string{"teardown", "-h"}, code: ExitOK, stdoutHas: "Usage: nodevol teardown [--dry-run] [--json] VOLUME_DIR...\n"},
		{args: []string{"teardown", "/nonexistent/x", "--workers", "2"}, code: ExitError, stderrHas: "nodevol teardown: unknown flag --workers\n"},
		{args: []string{"scan", "/var/lib/kubelet"}, code: ExitError, stderrHas: `scan takes no arguments (got "/var/lib/kubelet"); use --root DIR`},
		{args: []string{"scan", "--root"}, code: ExitError, stderrHas: "nodevol scan: flag needs an argument: --root\n"},
		{args: []string{"scan", "--roots", "/x"}, code: ExitError, stderrHas: "nodevol scan: unknown flag --roots (did you mean --root?)\n"},
		{args: []string{"scan", "--root", ""}, code: ExitError, stderrHas: "--root must not be empty"},
		{args: []string{"scan", "--dry-run"}, code: ExitError, stderrHas: "nodevol scan: unknown flag --dry-run\n"},
		{args: []string{"scan", "-h"}, code: ExitOK, stdoutHas: "Usage: nodevol scan [--json] [--root DIR]\n"},
		{args: []string{"demo"}, code: ExitError, stderrHas: "nodevol: the demo is not part of nodevol: it is its own program"},
		{args: []string{"demo", "-h"}, code: ExitError, stderrHas: "\tgo run ./cmd/nodevol-demo\n"},
		{args: []string{"usage", "-h"}, code: ExitOK, stdoutHas: "Usage: nodevol usage [--json] PATH...\n"},
		{args: []string{"version", "-h"}, code: ExitOK, stdoutHas: "Usage: nodevol version [--json]\n"},
		{args: []string{"version", "now"}, code: ExitError, stderrHas: `nodevol version: version takes no arguments (got "now")`},
		{args: []string{"versoin"}, code: ExitError, stderrHas: `unknown command "versoin" (did you mean "version"?)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := nodevol(t, tc.args...)
			r.wantCode(t, tc.code)
			clitest.WantOneStream(t, r.stdout, r.stderr, tc.stdoutHas, tc.stderrHas)
		})
	}
}

// The flag package's errors have no type; flagError recognises them by
// their messages. If a Go release rewords them, this fails.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dryrun"}, "unknown flag --dryrun (did you mean --dry-run?)"},
		{[]string{"--root"}, "flag needs an argument: --root"},
		{[]string{"--workers=x"}, `invalid value "x" for flag --workers: parse error`},
		{[]string{"--dry-run=x"}, `invalid boolean value "x" for --dry-run: parse error`},
		{[]string{"--\x1b[2J"}, `unknown flag --\x1b[2J`},
	} {
		fs := newFlagSet(&command{name: "test"}, io.Discard, io.Discard)
		fs.Bool("dry-run", false, "")
		fs.Int("workers", 1, "")
		fs.String("root", "", "")
		err := fs.Parse(tc.args)
		if err == nil {
			t.Fatalf("Parse(%q) = nil; want an error", tc.args)
		}
		if got := fs.flagError(err); got != tc.want {
			t.Errorf("flagError(Parse(%q) = %q) = %q; want %q", tc.args, err, got, tc.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	flags := []string{"help", "dry-run", "json", "workers"}
	cmds := []string{"help", "check", "rm", "teardown", "scan", "usage", "demo", "version"}
	for _, tc := range []struct {
		typed      string
		candidates []string
		want       string
	}{
		{"dryrun", flags, " (did you mean dry-run?)"},
		{"DRY-RUN", flags, " (did you mean dry-run?)"},
		{"jsno", flags, " (did you mean json?)"},
		{"jso", flags, " (did you mean json?)"},
		{"worker", flags, " (did you mean workers?)"},
		{"wor", flags, " (did you mean workers?)"}, // the only flag it begins
		{"x", flags, ""},
		{"verbose", flags, ""},
		{"force", flags, ""},
		{"rn", cmds, " (did you mean rm?)"},
		{"mv", cmds, ""},
		{"scna", cmds, " (did you mean scan?)"},
		{"cehck", cmds, " (did you mean check?)"},
		{"versoin", cmds, " (did you mean version?)"},
		{"list", cmds, ""},
		{"", cmds, ""},
		{"ab", []string{"ax", "ay"}, " (did you mean ax or ay?)"},
	} {
		if got := didYouMean(tc.typed, tc.candidates, "", ""); got != tc.want {
			t.Errorf("didYouMean(%q) = %q; want %q", tc.typed, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"json", "json", 0},
		{"dryrun", "dry-run", 1}, {"jsno", "json", 1}, {"ca", "abc", 3},
		{"kitten", "sitting", 3}, {"workers", "wrokers", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.b, tc.a, got, tc.want)
		}
	}
}

// The synopsis of each command is shown in three places: the usage, the
// command's own help and the package documentation. The first two are
// made from the command table; the documentation, which is not generated,
// must list the table's usage lines, in its order.
func TestSynopsesAgree(t *testing.T) {
	var usage bytes.Buffer
	cmds := commands()
	writeUsage(&usage, cmds)
	src, err := os.ReadFile("../../cmd/nodevol/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if want := docSynopses(cmds); !strings.Contains(string(src), "//\n"+want+"//\n") {
		t.Errorf("the package documentation in cmd/nodevol/main.go does not list the commands as the table does; want\n%s", want)
	}
	for _, c := range cmds {
		if c.run == nil || c.name == "serve" {
			// help: "nodevol help -h" is the usage; serve's help is the
			// agent's (internal/agent's TestAgentHelp).
			continue
		}
		r := nodevol(t, c.name, "-h")
		first, _, _ := strings.Cut(r.stdout, "\n")
		synopsis, ok := strings.CutPrefix(first, "Usage: ")
		if !ok {
			t.Errorf("nodevol %s -h begins %q; want \"Usage: nodevol %s ...\"", c.name, first, c.name)
			continue
		}
		if !strings.Contains(usage.String(), "\n  "+synopsis+"\n") {
			t.Errorf("the usage does not list %q:\n%s", synopsis, usage.String())
		}
		if !strings.Contains(string(src), "\n//\t"+synopsis+"\n") {
			t.Errorf("the package documentation in cmd/nodevol/main.go does not list %q", synopsis)
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		paths []string
		dry   bool
	}{
		{args: []string{"/a", "/b"}, paths: []string{"/a", "/b"}},
		{args: []string{"--dry-run", "/a"}, paths: []string{"/a"}, dry: true},
		// A flag after a path is still a flag: "rm /vol --dry-run" must not
		// remove /vol.
		{args: []string{"/a", "--dry-run"}, paths: []string{"/a"}, dry: true},
		{args: []string{"/a", "-dry-run", "/b"}, paths: []string{"/a", "/b"}, dry: true},
		{args: []string{"--", "-dry-run"}, paths: []string{"-dry-run"}},
		{args: []string{"/a", "--", "--dry-run", "/b"}, paths: []string{"/a", "--dry-run", "/b"}},
		{args: []string{"-"}, paths: []string{"-"}},
		{args: nil, paths: nil},
	} {
		fs := newFlagSet(&command{name: "test"}, io.Discard, io.Discard)
		dry := fs.Bool("dry-run", false, "")
		paths, code := parseArgs(fs, tc.args)
		if code != -1 || !slices.Equal(paths, tc.paths) || *dry != tc.dry {
			t.Errorf("parseArgs(%q) = %q, %d, dry-run=%v; want %q, -1, dry-run=%v", tc.args, paths, code, *dry, tc.paths, tc.dry)
		}
	}
}

// TestHelpWritesFlagsAsTheSynopsis: every command's help lists its flags
// with two dashes, as its synopsis, the help texts and the messages write
// them, and lists every flag its synopsis names.
func TestHelpWritesFlagsAsTheSynopsis(t *testing.T) {
	synopsisFlag := regexp.MustCompile(`--[a-z][a-z-]*`)
	for _, c := range commands() {
		if c.run == nil || c.name == "serve" { // serve's help is the agent's (TestAgentHelp)
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			r := nodevol(t, c.name, "-h")
			r.wantCode(t, ExitOK)
			_, flags, ok := strings.Cut(r.stdout, "\nFlags:\n")
			if !ok {
				t.Fatalf("nodevol %s -h lists no flags:\n%s", c.name, r.stdout)
			}
			listed := map[string]bool{}
			for line := range strings.Lines(flags) {
				if strings.HasPrefix(line, "    ") { // a flag's description
					continue
				}
				name, ok := strings.CutPrefix(line, "  --")
				if !ok {
					t.Errorf("nodevol %s -h: flag line %q; want it to begin with two dashes, as the synopsis writes flags", c.name, line)
					continue
				}
				name, _, _ = strings.Cut(strings.TrimSpace(name), " ")
				listed["--"+name] = true
			}
			for _, f := range synopsisFlag.FindAllString(c.synopsis, -1) {
				if !listed[f] {
					t.Errorf("nodevol %s -h: the synopsis names %s, the flags list %v", c.name, f, listed)
				}
			}
		})
	}
}
