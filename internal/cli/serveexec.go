package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
)

// AgentName is the agent's program: "nodevol serve" runs it.
const AgentName = "nodevol-agent"

// agentModule is the agent's package, as go install names it.
const agentModule = "github.com/nodevol/nodevol/cmd/" + AgentName

// serveHelp is what "nodevol help serve" says when the agent is missing;
// otherwise the agent's own help is printed, by the agent.
const serveHelp = `Runs nodevol-agent, the node agent, from the directory nodevol itself is in, with
the same arguments: nodevol-agent -h says what they are.`

// agentMissingError is why "nodevol serve" cannot run the agent: it is not
// beside nodevol.
type agentMissingError struct {
	Path    string // where it was looked for
	Version string // the version to install: nodevol's own, or "latest"
	Err     error
}

func (e *agentMissingError) Error() string {
	return fmt.Sprintf("the agent is a program of its own, %s, which is not installed beside nodevol (%v); install it: go install %s@%s",
		AgentName, e.Err, agentModule, e.Version)
}

func (e *agentMissingError) Unwrap() error { return e.Err }

// runServe is "nodevol serve": it runs the agent, nodevol-agent, from the
// directory of the running executable (not $PATH: the agent beside this
// nodevol, of the same build), with the same arguments, so that every
// command line that ran "nodevol serve" (a DaemonSet's args, a harness)
// still works. On Unix the agent replaces this process (exec): it keeps its
// PID, its descriptors and its signals, as "nodevol serve" had them. The
// agent is a program of its own so that nodevol does not link net/http,
// TLS and runtime/metrics, whose initialisation every command would pay
// at start (docs/benchmarks.md).
func runServe(_ *flagSet, args []string, stdout, stderr io.Writer) int {
	path, err := agentPath()
	if err == nil {
		var code int
		code, err = runAgent(path, args, stdout, stderr)
		if err == nil {
			return code
		}
	}
	fmt.Fprintf(stderr, "nodevol serve: %s\n", display(err.Error()))
	return ExitError
}

// agentPath is the agent beside the running executable, or an
// *agentMissingError.
func agentPath() (string, error) {
	exe, err := os.Executable()
	if err != nil && filepath.IsAbs(os.Args[0]) && !secureExec() {
		// Without /proc (a chroot), Linux cannot say; the absolute path
		// this process was run by is the best guess (no $PATH search).
		// argv[0] is whatever its caller chose, who could have run any
		// program: never trusted by a process that exec made more
		// privileged than its caller (set-user-ID, file capabilities),
		// where it would pick what runs with those privileges.
		exe, err = os.Args[0], nil
	}
	if err != nil {
		return "", fmt.Errorf("cannot find the running executable, beside which the agent is installed: %w", err)
	}
	name := AgentName
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	path := filepath.Join(filepath.Dir(exe), name)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", &agentMissingError{Path: path, Version: installVersion(), Err: err}
	case err != nil:
		return "", err
	case !fi.Mode().IsRegular():
		return "", &agentMissingError{Path: path, Version: installVersion(), Err: &fs.PathError{Op: "stat", Path: path, Err: errors.New("not a regular file")}}
	}
	return path, nil
}

// installVersion is the version of nodevol-agent to install: this
// nodevol's, or "latest" for a build from a checkout.
func installVersion() string {
	v := releaseVersion
	if bi, ok := debug.ReadBuildInfo(); v == "" && ok {
		v = bi.Main.Version
	}
	if v == "" || v == "(devel)" {
		return "latest"
	}
	return v
}

// runAgent runs the agent at path with args as a child process, its
// output copied to stdout and stderr, and returns its exit code: where the
// process cannot be replaced (execAgent), or when the caller's writers are
// not this process's own (a program running the command in-process).
func runAgent(path string, args []string, stdout, stderr io.Writer) (int, error) {
	if stdout == io.Writer(os.Stdout) && stderr == io.Writer(os.Stderr) {
		if err := execAgent(path, args); !errors.Is(err, errors.ErrUnsupported) {
			return 0, fmt.Errorf("run %s: %w", path, err)
		}
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	err := cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok && exit.ExitCode() >= 0 {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("run %s: %w", path, err)
	}
	return ExitOK, nil
}
