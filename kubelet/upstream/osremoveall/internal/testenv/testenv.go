// Package testenv stands in for the standard library's internal/testenv
// (which only the standard library may import) in Go's os RemoveAll tests:
// the three functions they call, doing what the originals do on Linux.
package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Command is exec.Command for a test: it fails the test when the program
// cannot be run at all.
func Command(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("skipping: %s: %v", name, err)
	}
	return exec.Command(name, args...)
}

// CleanCmdEnv sets cmd's environment to this process's without GODEBUG
// and GOTRACEBACK, as the original does.
func CleanCmdEnv(cmd *exec.Cmd) *exec.Cmd {
	if cmd.Env != nil {
		panic("environment already set")
	}
	for _, env := range os.Environ() {
		if strings.HasPrefix(env, "GODEBUG=") || strings.HasPrefix(env, "GOTRACEBACK=") {
			continue
		}
		cmd.Env = append(cmd.Env, env)
	}
	return cmd
}

// SkipFlaky skips a test known to be flaky (upstream issue number).
func SkipFlaky(t testing.TB, issue int) {
	t.Helper()
	t.Skipf("skipping known flaky test: golang.org/issue/%d", issue)
}
