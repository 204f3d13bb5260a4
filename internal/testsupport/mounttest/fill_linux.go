package mounttest

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Fill writes to path (created or appended to) until a write fails or max
// bytes are written, and returns what was written and the error: how a
// quota test meets its limit.
func Fill(t testing.TB, path string, max int64) (int64, error) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return fillFile(f, max)
}

// FillWithoutCapSysResource is Fill from a thread without
// CAP_SYS_RESOURCE, like a pod's container (the default capability set
// lacks it). The VFS quota code that ext4 uses lets a task with that
// capability exceed hard limits (ignore_hardlimit in fs/quota/dquot.c), so
// a root test process would never see the limit on ext4; XFS enforces
// project limits for root as well.
func FillWithoutCapSysResource(t testing.TB, path string, max int64) (int64, error) {
	t.Helper()
	type result struct {
		n   int64
		err error
	}
	done := make(chan result)
	go func() {
		// Capabilities belong to a thread. This goroutine keeps its thread
		// locked to the end, so the runtime discards the thread with the
		// dropped capability instead of reusing it.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var caps [2]unix.CapUserData
		if err := unix.Capget(&hdr, &caps[0]); err != nil {
			done <- result{err: fmt.Errorf("capget: %w", err)}
			return
		}
		caps[unix.CAP_SYS_RESOURCE/32].Effective &^= 1 << (unix.CAP_SYS_RESOURCE % 32)
		if err := unix.Capset(&hdr, &caps[0]); err != nil {
			done <- result{err: fmt.Errorf("capset: %w", err)}
			return
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			done <- result{err: err}
			return
		}
		n, err := fillFile(f, max)
		done <- result{n, err}
	}()
	r := <-done
	return r.n, r.err
}

func fillFile(f *os.File, max int64) (int64, error) {
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	var total int64
	for total < max {
		chunk := buf
		if rest := max - total; rest < int64(len(chunk)) {
			chunk = chunk[:rest]
		}
		n, err := f.Write(chunk)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, f.Sync()
}
