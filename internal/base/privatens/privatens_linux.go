package privatens

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

func ownNamespace() (string, error) { return os.Readlink("/proc/self/ns/mnt") }

// child trusts the variable only as far as the kernel confirms it: the
// parent process really is in the namespace the variable names, and this
// process is not. A variable set by hand (or inherited) on the host names
// a namespace the parent shell is not in, or the one this process is in.
func child(envName string) bool {
	parent, ok := os.LookupEnv(envName)
	if !ok || parent == "" {
		return false
	}
	own, err := ownNamespace()
	if err != nil || own == parent {
		return false
	}
	actual, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/mnt")
	return err == nil && actual == parent
}

func reexec(envName string, args []string, s Streams) (int, error) {
	if os.Geteuid() != 0 {
		return 0, ErrNotRoot
	}
	own, err := ownNamespace()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command("/proc/self/exe", args...)
	if r, ok := s.Stdin.(io.Reader); ok && r != nil {
		cmd.Stdin = r
	}
	if w, ok := s.Stdout.(io.Writer); ok && w != nil {
		cmd.Stdout = w
	}
	if w, ok := s.Stderr.(io.Writer); ok && w != nil {
		cmd.Stderr = w
	}
	cmd.Env = append(append(os.Environ(), s.Env...), envName+"="+own)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The Go runtime remounts / as MS_REC|MS_PRIVATE after unsharing
		// CLONE_NEWNS, so nothing propagates back to the host.
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-s.Signals: // never, when Signals is nil
				_ = cmd.Process.Signal(sig) // fails only once the child is gone
			case <-exited:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(exited)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.Exited():
		return exit.ExitCode(), nil
	case errors.As(err, &exit):
		// Killed by a signal: 128+signal, as shells report it.
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return 128, nil
	}
	return 0, err
}
