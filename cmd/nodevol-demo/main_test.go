package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

// result is what one run of nodevol-demo produced.
type result struct {
	code           int
	stdout, stderr string
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

// Its arguments are handled as nodevol's commands handle theirs: help
// asked for goes to stdout, a mistake to stderr.
func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		args                 []string
		code                 int
		stdoutHas, stderrHas string
	}{
		{args: []string{"extra"}, code: exitError, stderrHas: "demo takes no arguments"},
		{args: []string{"--nosuch"}, code: exitError, stderrHas: "nodevol-demo: unknown flag --nosuch\nUsage: nodevol-demo\nRun \"nodevol-demo -h\" for details.\n"},
		{args: []string{"-h"}, code: exitOK, stdoutHas: "Usage: nodevol-demo\n\nRun the volume manager"},
		{args: []string{"--help"}, code: exitOK, stdoutHas: "Usage: nodevol-demo\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			r := result{code: run(tc.args, &stdout, &stderr), stdout: stdout.String(), stderr: stderr.String()}
			r.wantCode(t, tc.code)
			clitest.WantOneStream(t, r.stdout, r.stderr, tc.stdoutHas, tc.stderrHas)
		})
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
