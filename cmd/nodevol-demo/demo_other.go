//go:build !linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
)

// isolateDemo refuses outside Linux: mount namespaces, and the guarantees
// mountdetect gives (which every teardown in the demo relies on), are
// Linux-only, so the demo could only show failures there.
func isolateDemo(args []string, sigs <-chan os.Signal, stdout, stderr io.Writer) (iso isolation, code int, done bool) {
	fmt.Fprintf(stderr, "nodevol demo: not supported on %s: volume teardown needs Linux (%v)\n", runtime.GOOS, errors.ErrUnsupported)
	return isolation{}, exitError, true
}

func mountNAS(dir string) error   { return errors.ErrUnsupported }
func unmountNAS(dir string) error { return errors.ErrUnsupported }
func detachNAS(dir string) error  { return errors.ErrUnsupported }

func mountOf(dir string) string                     { return "" }
func mountPointsUnder(dir string) ([]string, error) { return nil, errors.ErrUnsupported }
