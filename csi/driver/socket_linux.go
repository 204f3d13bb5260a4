package driver

import "golang.org/x/sys/unix"

// unixSocket is a new unix stream socket, close-on-exec.
func unixSocket() (int, error) {
	return unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
}
