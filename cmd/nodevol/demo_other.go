//go:build !linux

package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
)

// isolateDemo never mounts outside Linux: mount namespaces, and the
// guarantees mountdetect gives, are Linux-only.
func isolateDemo(args []string, stdout, stderr io.Writer) (iso isolation, code int, done bool) {
	return isolation{skip: fmt.Sprintf("%s: skipping the tmpfs NAS mount; mount namespaces are Linux-only.", runtime.GOOS)}, 0, false
}

func mountNAS(dir string) error   { return errors.ErrUnsupported }
func unmountNAS(dir string) error { return errors.ErrUnsupported }
func detachNAS(dir string) error  { return errors.ErrUnsupported }

func mountsUnder(dir string) ([]string, error)      { return nil, errors.ErrUnsupported }
func mountPointsUnder(dir string) ([]string, error) { return nil, errors.ErrUnsupported }
