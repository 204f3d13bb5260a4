package agent

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/nodevol/nodevol/internal/cli"
)

// ArgsError is a command line a nodevol command refuses, with what the
// command would have said about it.
type ArgsError struct {
	Command string // "serve"
	Args    []string
	Message string // the command's own words, first line
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("nodevol %s %s: %s", e.Command, strings.Join(e.Args, " "), e.Message)
}

// CheckServeArgs parses args (what follows "nodevol serve") with serve's
// own flag set and the checks it makes before touching anything, without
// running it: nil when serve would start with them, else an *ArgsError.
// Deployment manifests are tested with it (kubelet/deploytest).
func CheckServeArgs(args []string) error {
	var stderr bytes.Buffer
	a, code := parseServeArgs(newFlagSet(io.Discard, &stderr), args, &stderr)
	switch {
	case code < 0 && a.version:
		return &ArgsError{Command: "serve", Args: args, Message: "asks for the version, not to serve"}
	case code < 0:
		return nil
	case code == cli.ExitOK:
		return &ArgsError{Command: "serve", Args: args, Message: "asks for the help, not to serve"}
	}
	msg, _, _ := strings.Cut(stderr.String(), "\n")
	return &ArgsError{Command: "serve", Args: args, Message: msg}
}

// newFlagSet is the agent's flag set, still without flags
// (parseServeArgs declares them).
func newFlagSet(stdout, stderr io.Writer) *cli.FlagSet {
	return cli.NewProgramFlagSet(cli.AgentName, cli.ServeSynopsis, serveHelp, stdout, stderr)
}
