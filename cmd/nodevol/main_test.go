package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/mounttest"
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
// teardown refuse without it (namespace_linux_test.go tests that refusal).
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
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
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
// and "errors" (and "moreErrors" only past maxReportedErrors failures).
func withError(keys []string) []string {
	return append(slices.Clip(keys), "error", "errors")
}

// realTempDir is t.TempDir with symlinks resolved, because the kernel
// names mount points that way.
func realTempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		stderrHas  string
		stdoutNone bool
	}{
		{args: nil, code: exitError, stderrHas: "Usage:"},
		{args: []string{"help"}, code: exitOK, stderrHas: "Usage:"},
		{args: []string{"-h"}, code: exitOK, stderrHas: "Usage:"},
		{args: []string{"--help"}, code: exitOK, stderrHas: "Usage:"},
		{args: []string{"help", "rm"}, code: exitOK, stderrHas: "Usage: nodevol rm"},
		{args: []string{"help", "nosuch"}, code: exitError, stderrHas: `unknown command "nosuch"`},
		{args: []string{"nosuch"}, code: exitError, stderrHas: `unknown command "nosuch"`},
		{args: []string{"check"}, code: exitError, stderrHas: "no PATH given"},
		{args: []string{"check", "-h"}, code: exitOK, stderrHas: "Usage: nodevol check"},
		{args: []string{"check", "--nosuch", "/"}, code: exitError, stderrHas: "flag provided but not defined"},
		{args: []string{"rm"}, code: exitError, stderrHas: "no PATH given"},
		{args: []string{"rm", "--dry-run"}, code: exitError, stderrHas: "no PATH given"},
		{args: []string{"rm", "--workers", "0", "/nonexistent/x"}, code: exitError, stderrHas: "--workers must be at least 1"},
		{args: []string{"rm", "--workers=-3", "/nonexistent/x"}, code: exitError, stderrHas: "--workers must be at least 1"},
		{args: []string{"rm", "--workers", "many", "/nonexistent/x"}, code: exitError, stderrHas: "invalid value"},
		{args: []string{"rm", "/nonexistent/x", "--nosuch"}, code: exitError, stderrHas: "flag provided but not defined"},
		{args: []string{"help", "teardown"}, code: exitOK, stderrHas: "Usage: nodevol teardown"},
		{args: []string{"help", "scan"}, code: exitOK, stderrHas: "Usage: nodevol scan"},
		{args: []string{"teardown"}, code: exitError, stderrHas: "no VOLUME_DIR given"},
		{args: []string{"teardown", "--dry-run", "--json"}, code: exitError, stderrHas: "no VOLUME_DIR given"},
		{args: []string{"teardown", "-h"}, code: exitOK, stderrHas: "Usage: nodevol teardown [--dry-run] [--json] VOLUME_DIR..."},
		{args: []string{"teardown", "/nonexistent/x", "--workers", "2"}, code: exitError, stderrHas: "flag provided but not defined: -workers"},
		{args: []string{"scan", "/var/lib/kubelet"}, code: exitError, stderrHas: `scan takes no arguments (got "/var/lib/kubelet"); use --root DIR`},
		{args: []string{"scan", "--root"}, code: exitError, stderrHas: "flag needs an argument: -root"},
		{args: []string{"scan", "--root", ""}, code: exitError, stderrHas: "--root must not be empty"},
		{args: []string{"scan", "--dry-run"}, code: exitError, stderrHas: "flag provided but not defined: -dry-run"},
		{args: []string{"scan", "-h"}, code: exitOK, stderrHas: "Usage: nodevol scan [--json] [--root DIR]"},
		{args: []string{"demo", "extra"}, code: exitError, stderrHas: "demo takes no arguments"},
		{args: []string{"demo", "-h"}, code: exitOK, stderrHas: "Usage: nodevol demo"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := nodevol(t, tc.args...)
			r.wantCode(t, tc.code)
			wantContains(t, "stderr", r.stderr, tc.stderrHas)
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing (usage goes to stderr)", r.stdout)
			}
		})
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
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		dry := fs.Bool("dry-run", false, "")
		paths, code := parseArgs(fs, tc.args)
		if code != -1 || !slices.Equal(paths, tc.paths) || *dry != tc.dry {
			t.Errorf("parseArgs(%q) = %q, %d, dry-run=%v; want %q, -1, dry-run=%v", tc.args, paths, code, *dry, tc.paths, tc.dry)
		}
	}
}

func TestIndentWriter(t *testing.T) {
	var b bytes.Buffer
	w := &indentWriter{w: &b, prefix: "  ", short: strings.NewReplacer("/long/path", "$VOL")}
	for _, s := range []string{"one\ntw", "o\n", "", "/long/path/x\n\nlast"} {
		if n, err := io.WriteString(w, s); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if want := "  one\n  two\n  $VOL/x\n  \n  last"; b.String() != want {
		t.Errorf("indented %q, want %q", b.String(), want)
	}
}
