//go:build !linux

package driver

import "golang.org/x/sys/unix"

// unixSocket is a new unix stream socket, close-on-exec (the driver is for
// Linux; elsewhere it builds, for the library's users' tests).
func unixSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fd)
	}
	return fd, err
}
