package agent

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// watchMountTable reports changes to this thread's mount table: poll(2) on
// /proc/thread-self/mountinfo returns POLLPRI|POLLERR once after each time
// a mount is added, removed or changed in the namespace (Linux 2.6.15;
// proc(5)). Each change is one non-blocking send on a channel of capacity
// one, so bursts coalesce; the scan loop debounces further. It stops when
// ctx is done; when the file cannot be watched it logs why and returns a
// channel that never fires (the interval scans go on).
//
// The file is opened with open(2), not os.Open: os.Open adds the fd to the
// Go runtime's epoll set, and each epoll_wait of the runtime then takes
// the change as seen (the kernel's mounts_poll records the event it
// reports, whoever asks), so that our poll, losing the race, never fires.
func watchMountTable(ctx context.Context, log logr.Logger) <-chan struct{} {
	out := make(chan struct{}, 1)
	// thread-self (Linux 3.17): the namespace of a thread that runs
	// goroutines. /proc/self is the main thread's, which is not when a
	// goroutine that locked it into another namespace ended (Go then
	// wedges the main thread instead of ending it).
	name := "/proc/thread-self/mountinfo"
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		name = "/proc/self/mountinfo"
		fd, err = unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		log.Error(err, "cannot watch the mount table; scanning at the interval only", "path", name)
		return out
	}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		for ctx.Err() == nil {
			// A timeout, so that ctx is noticed: the fd cannot be woken.
			n, err := unix.Poll(fds, 500)
			if errors.Is(err, unix.EINTR) || n == 0 {
				continue
			}
			if err != nil {
				log.Error(err, "poll the mount table; scanning at the interval only", "path", name)
				return
			}
			if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
				// poll itself took the change as seen: no read is needed,
				// and none is made (the table can be large).
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}
