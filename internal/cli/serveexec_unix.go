//go:build unix

package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// execAgent replaces this process with the agent at path, run with args
// and this process's environment. It returns only when the exec failed.
func execAgent(path string, args []string) error {
	return unix.Exec(path, append([]string{path}, args...), os.Environ())
}
