// Package clitest holds what the tests of nodevol's programs (internal/cli
// for nodevol, cmd/nodevol-demo) share: building a program once, running
// it as an operator's shell would, and reading its output. Only tests
// import it.
package clitest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Build builds the command in the directory pkg into a temporary
// directory removed when the test ends, and returns the binary's path.
// The go command is found on PATH, where "go test" puts its own
// GOROOT/bin first. The directory is readable by everyone so that the
// binary can also run as an unprivileged user.
//
// -buildvcs=false: stamping the VCS state runs git, which refuses a
// checkout owned by another user ("error obtaining VCS status"), so the
// tests would fail for anyone but the checkout's owner; no behaviour the
// tests check depends on the stamp ("nodevol version" then says
// "unknown", as for any build without it).
func Build(t testing.TB, pkg string) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("cannot build %s: no go command on PATH: %v", pkg, err)
	}
	dir, err := os.MkdirTemp("", "nodevol-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // holds only the binary
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(pkg) // "." names the current directory's command
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(abs))
	out, err := exec.Command(goCmd, "build", "-buildvcs=false", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build -buildvcs=false -o %s %s: %v\n%s", bin, pkg, err, out)
	}
	return bin
}

// Exec runs the program at path with args and returns its exit code and
// output; a program that did not exit (killed by a signal, not started)
// fails the test. cmdFn may adjust the command (environment,
// credentials) before it starts.
func Exec(t testing.TB, path string, cmdFn func(*exec.Cmd), args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(path, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if cmdFn != nil {
		cmdFn(cmd)
	}
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		code = exit.ExitCode()
	default:
		t.Fatalf("%s %q: %v\nstderr:\n%s", path, args, err, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// WantContains fails the test for each of wants that got (named what in
// the message) does not contain.
func WantContains(t testing.TB, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

// WantOneStream checks where a program wrote: with stdoutHas set (help
// that was asked for), stdout must contain it and stderr be empty;
// otherwise (a usage mistake) stderr must contain stderrHas and stdout be
// empty.
func WantOneStream(t testing.TB, stdout, stderr, stdoutHas, stderrHas string) {
	t.Helper()
	if stdoutHas != "" {
		WantContains(t, "stdout", stdout, stdoutHas)
		if stderr != "" {
			t.Errorf("stderr = %q, want nothing (help asked for goes to stdout)", stderr)
		}
		return
	}
	WantContains(t, "stderr", stderr, stderrHas)
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing (a usage mistake goes to stderr)", stdout)
	}
}

// WantRow fails unless the table in out (a scan) has a row with exactly
// these columns (columns are separated by two spaces or more).
func WantRow(t testing.TB, out string, cols ...string) {
	t.Helper()
	want := strings.Join(cols, "|")
	for line := range strings.Lines(out) {
		if strings.Join(columnSep.Split(strings.TrimSpace(line), -1), "|") == want {
			return
		}
	}
	t.Errorf("no table row %q in:\n%s", want, out)
}

var columnSep = regexp.MustCompile(`\s{2,}`)
