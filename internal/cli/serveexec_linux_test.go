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
