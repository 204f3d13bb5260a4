package cli

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// watchMountTable reports changes to this process's mount table: poll(2)
// on /proc/self/mountinfo returns POLLPRI|POLLERR when a mount is added,
// removed or changed in the namespace (Linux 2.6.15; proc(5)). Each change
// is one non-blocking send on a channel of capacity one, so bursts
// coalesce; the scan loop debounces further. It stops when ctx is done;
// when the file cannot be watched it logs why and returns a channel that
// never fires (the interval scans go on).
func watchMountTable(ctx context.Context, log logr.Logger) <-chan struct{} {
	out := make(chan struct{}, 1)
	// thread-self (Linux 3.17): the namespace of a thread that runs
	// goroutines. /proc/self is the main thread's, which is not when a
	// goroutine that locked it into another namespace ended (Go then
	// wedges the main thread instead of ending it).
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		f, err = os.Open("/proc/self/mountinfo")
	}
	if err != nil {
		log.Error(err, "cannot watch the mount table; scanning at the interval only")
		return out
	}
	go func() {
		defer f.Close()
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
		for ctx.Err() == nil {
			// A timeout, so that ctx is noticed: the fd cannot be woken.
			n, err := unix.Poll(fds, 500)
			if errors.Is(err, unix.EINTR) || n == 0 {
				continue
			}
			if err != nil {
				log.Error(err, "poll /proc/self/mountinfo; scanning at the interval only")
				return
			}
			if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
				// The kernel takes the change as seen when the file is
				// read from its start; unread, poll would fire at once
				// forever.
				_, err := f.Seek(0, io.SeekStart)
				if err == nil {
					_, err = io.Copy(io.Discard, f)
				}
				if err != nil {
					log.Error(err, "read /proc/self/mountinfo; scanning at the interval only")
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}
