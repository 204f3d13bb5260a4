package cli

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// agentPkg is the agent's command, relative to this package.
const agentPkg = "../../cmd/nodevol-agent"

// copyFile copies the executable src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestServeRunsTheAgent: "nodevol serve ARGS" is nodevol-agent ARGS, run
// from nodevol's own directory (not $PATH) in nodevol's place: its help,
// its usage mistakes and exit codes, and a whole run that starts serving
// and stops on SIGTERM with status 0, in the same process (the PID a
// container runtime or a harness knows is the agent's).
func TestServeRunsTheAgent(t *testing.T) {
	agentBin := clitest.Build(t, agentPkg)
	nodevol := filepath.Join(filepath.Dir(agentBin), "nodevol")
	copyFile(t, buildBinary(t).path, nodevol)
	bin := binary{path: nodevol}
	// An agent on $PATH is not the one run.
	t.Setenv("PATH", t.TempDir()+string(os.PathListSeparator)+os.Getenv("PATH"))

	r := bin.run(t, nil, "serve", "--help")
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "Usage: nodevol-agent "+ServeSynopsis, "\nFlags:\n", "--secure-metrics-listen")
	r = bin.run(t, nil, "help", "serve")
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "Usage: nodevol-agent "+ServeSynopsis)
	r = bin.run(t, nil, "serve", "--interval=1ms")
	r.wantCode(t, ExitError)
	wantContains(t, "stderr", r.stderr, "too short: at least 1s")

	cmd := exec.Command(nodevol, "serve", "--root", t.TempDir(), "--listen", "127.0.0.1:0", "--interval", "1s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	serving := make(chan bool, 1)
	var log strings.Builder
	go func() {
		found := false
		for lines.Scan() {
			log.WriteString(lines.Text() + "\n")
			if !found && strings.Contains(lines.Text(), `"serving"`) {
				found = true
				serving <- true
			}
		}
		close(serving)
	}()
	select {
	case ok := <-serving:
		if !ok {
			t.Fatalf("nodevol serve exited without serving")
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("nodevol serve did not say it serves within 30s")
	}
	argv, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := strings.Cut(string(argv), "\x00"); got != agentBin {
		t.Errorf("process %d runs %q; want the agent beside nodevol, %s, in its place", cmd.Process.Pid, got, agentBin)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("nodevol serve after SIGTERM: %v; want exit status 0\n%s", err, log.String())
	}
}

// TestServeWithoutTheAgent: without nodevol-agent beside it, "nodevol
// serve" says what to install and exits with status 2, whatever the
// arguments; nothing else is run.
func TestServeWithoutTheAgent(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{{"serve"}, {"serve", "--help"}, {"help", "serve"}} {
		r := bin.run(t, nil, args...)
		r.wantCode(t, ExitError)
		wantContains(t, "stderr", r.stderr, "nodevol serve: the agent is a program of its own, nodevol-agent, which is not installed beside nodevol",
			filepath.Join(filepath.Dir(bin.path), "nodevol-agent"), "go install github.com/nodevol/nodevol/cmd/nodevol-agent@")
		if r.stdout != "" {
			t.Errorf("nodevol %q: stdout %q; want nothing", args, r.stdout)
		}
	}
	// The error, in-process: typed, and the file it looked for.
	_, err := agentPath()
	var missing *agentMissingError
	if !errors.As(err, &missing) || !errors.Is(err, fs.ErrNotExist) || filepath.Base(missing.Path) != AgentName {
		t.Errorf("agentPath() = %v; want an *agentMissingError wrapping fs.ErrNotExist for %s", err, AgentName)
	}
	if code := Run([]string{"serve"}, io.Discard, io.Discard); code != ExitError {
		t.Errorf("Run(serve) without the agent = %d; want %d", code, ExitError)
	}
}

// TestServeTrustsArgv0OnlyWhenUnprivileged: without /proc, the running
// executable is unknown and "nodevol serve" takes argv[0], which its
// caller chose, for the path of nodevol. A caller that could run any
// program anyway may (the control: a program beside that argv[0] runs);
// a set-user-ID nodevol run by another user must not, or that user picks
// the program run with nodevol's privileges. The planted agent prints a
// sentinel, which must never be printed: the run fails, saying why.
func TestServeTrustsArgv0OnlyWhenUnprivileged(t *testing.T) {
	mounttest.RequireRoot(t, "to mount over /proc in a mount namespace, and to make nodevol set-user-ID root")
	for _, tool := range []string{"unshare", "setpriv", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			mounttest.Skip(t, "no %s: %v", tool, err)
		}
	}
	// Directories another user can reach: t.TempDir's are 0700.
	top, err := os.MkdirTemp("", "nodevol-argv0-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	realDir, plantDir := filepath.Join(top, "real"), filepath.Join(top, "plant")
	for _, d := range []string{top, realDir, plantDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nodevol := filepath.Join(realDir, "nodevol")
	copyFile(t, buildBinary(t).path, nodevol)
	const sentinel = "SENTINEL: the planted agent ran\n"
	if err := os.WriteFile(filepath.Join(plantDir, AgentName), []byte("#!/bin/sh\nprintf '"+strings.TrimSuffix(sentinel, "\n")+"\\n'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(plantDir, "nodevol")

	// run runs nodevol serve with argv[0] planted, /proc hidden by a
	// tmpfs in a mount namespace of its own, as user (setpriv args).
	run := func(user ...string) (string, string, int) {
		inner := `exec -a "$ARGV0" "$NODEVOL" serve`
		script := `mount -t tmpfs none /proc && exec ` + strings.Join(append([]string{"setpriv"}, user...), " ") + ` bash -c '` + inner + `'`
		if len(user) == 0 {
			script = `mount -t tmpfs none /proc && ` + inner
		}
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "bash", "-c", script)
		cmd.Env = append(os.Environ(), "ARGV0="+planted, "NODEVOL="+nodevol)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}

	// The control: root runs nodevol, not set-user-ID; argv[0] is taken.
	stdout, stderr, code := run()
	if stdout != sentinel || code != 0 {
		t.Fatalf("control (no /proc, unprivileged exec): exit %d, stdout %q, stderr %q; want the program beside argv[0] run (%q)", code, stdout, stderr, sentinel)
	}

	// nodevol set-user-ID root, run by nobody.
	if err := os.Chmod(nodevol, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = run("--reuid=65534", "--regid=65534", "--clear-groups")
	if strings.Contains(stdout, strings.TrimSuffix(sentinel, "\n")) || code != ExitError ||
		!strings.Contains(stderr, "nodevol serve: cannot find the running executable") {
		t.Errorf("set-user-ID nodevol, no /proc, argv[0] %s: exit %d, stdout %q, stderr %q; want exit %d, the running executable not found, nothing run",
			planted, code, stdout, stderr, ExitError)
	}
}
