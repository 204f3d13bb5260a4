//go:build !unix

package cli

import "errors"

// execAgent cannot replace the process here: the agent is run as a child
// (runAgent).
func execAgent(string, []string) error { return errors.ErrUnsupported }

// secureExec is false: no set-user-ID execution here.
func secureExec() bool { return false }
