package mountns

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
)

func ownNamespace() (string, error) { return os.Readlink("/proc/self/ns/mnt") }

func child(envName string) bool {
	parent, ok := os.LookupEnv(envName)
	if !ok {
		return false
	}
	own, err := ownNamespace()
	return err == nil && parent != "" && parent != own
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
