package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// hostLockName is the abstract unix socket whose holder is the one e2e
// run on this host. Two runs at once break each other: each covers the
// same host directories (hostDirs) with its private tmpfs, and one that
// removes a directory it created, when it ends, detaches the other's tmpfs
// in every namespace. An abstract socket (network namespace of the host)
// is released by the kernel when the driver exits, however it exits, and
// leaves no file behind.
const hostLockName = "@nodevol-e2e"

// lockHost waits until no other e2e run holds the host (the abstract
// socket name, hostLockName but in tests), and holds it until release is
// called.
func lockHost(ctx context.Context, name string, log *logger) (release func(), err error) {
	var l net.Listener
	try := func() (bool, error) {
		l, err = net.Listen("unix", name)
		if errors.Is(err, syscall.EADDRINUSE) {
			return false, nil
		}
		return err == nil, err
	}
	if ok, err := try(); err != nil {
		return nil, fmt.Errorf("host lock %s: %w", name, err)
	} else if !ok {
		log.Printf("another e2e run holds this host (abstract socket %s): waiting for it", name)
		t0 := time.Now()
		if err := poll(ctx, 24*time.Hour, try); err != nil {
			return nil, fmt.Errorf("host lock %s: %w", name, err)
		}
		log.Printf("host lock taken after %.1fs", time.Since(t0).Seconds())
	}
	return func() { _ = l.Close() }, nil
}
