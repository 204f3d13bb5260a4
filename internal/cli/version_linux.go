package cli

import "golang.org/x/sys/unix"

// kernelRelease is uname's release ("6.18.44-fc"), or "" when uname fails.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
