//go:build unix

package cli

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// execAgent replaces this process with the agent at path, run with args
// and this process's environment. It returns only when the exec failed.
func execAgent(path string, args []string) error {
	return unix.Exec(path, append([]string{path}, args...), os.Environ())
}

// secureExec reports whether this process runs in secure-execution mode:
// on Linux the auxiliary vector's AT_SECURE (set-user-ID or set-group-ID,
// file capabilities, a security module's say); elsewhere, or when the
// vector cannot be read, real and effective IDs that differ.
func secureExec() bool {
	const atSecure = 23 // AT_SECURE, <linux/auxvec.h>
	if auxv, err := unix.Auxv(); err == nil && runtime.GOOS == "linux" {
		for _, kv := range auxv {
			if kv[0] == atSecure {
				return kv[1] != 0
			}
		}
	}
	return os.Getuid() != os.Geteuid() || os.Getgid() != os.Getegid()
}
