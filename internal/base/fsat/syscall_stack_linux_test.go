package fsat_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// atDepth calls fn with depth frames of about 1 KiB on the stack, so that
// the calls fn makes start at every distance from the end of the
// goroutine's stack: some grow it (the stack is copied elsewhere) on the
// way from the name's copy into the system call.
//
//go:noinline
func atDepth(depth int, fn func()) {
	var pad [1024]byte
	if depth == 0 {
		fn()
		return
	}
	atDepth(depth-1, fn)
	runtime.KeepAlive(pad)
}

// TestNamesFromTheStackSurviveStackMoves: the names Openat, Openat2 and
// statx copy on the caller's stack reach the kernel intact while the
// goroutine's stack grows (copied on a call at any depth) and the garbage
// collector shrinks stacks as it runs alongside: each of thousands of
// calls, each at another depth, opens exactly the file it names (255-byte
// names that differ only in their last bytes) and reads its content byte
// for byte.
func TestNamesFromTheStackSurviveStackMoves(t *testing.T) {
	dir := t.TempDir()
	const files = 64
	name := func(i int) string { return strings.Repeat("n", 250) + fmt.Sprintf("%05d", i) }
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, name(i)), []byte(fmt.Sprintf("content of %d", i)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root, err := fsat.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			runtime.GC()
		}
	}()
	defer func() { stop.Store(true); <-done }()
	bad := 0
	for i := range 3000 {
		k := i % files
		want := fmt.Sprintf("content of %d", k)
		// Each in a new goroutine: its stack starts small and grows.
		errs := make(chan string, 1)
		go func() {
			var msg string
			atDepth(i%40, func() {
				fd, err := fsat.Openat(root.Fd(), name(k), unix.O_RDONLY, 0)
				if err != nil {
					msg = fmt.Sprintf("Openat %d: %v", k, err)
					return
				}
				buf := make([]byte, 64)
				n, _ := unix.Read(fd, buf)
				unix.Close(fd)
				if string(buf[:n]) != want {
					msg = fmt.Sprintf("Openat of name %d read %q", k, buf[:n])
					return
				}
				fd, err = fsat.Openat2(root.Fd(), name(k), &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
				if err != nil {
					msg = fmt.Sprintf("Openat2 %d: %v", k, err)
					return
				}
				n, _ = unix.Read(fd, buf)
				unix.Close(fd)
				if string(buf[:n]) != want {
					msg = fmt.Sprintf("Openat2 of name %d read %q", k, buf[:n])
					return
				}
				if s, err := fsat.StatMount(root.Fd(), name(k), 0); err != nil || s.Size != uint64(len(want)) {
					msg = fmt.Sprintf("StatMount %d: %+v, %v", k, s, err)
					return
				}
				if b, err := root.ReadFile(name(k), 64); err != nil || string(b) != want {
					msg = fmt.Sprintf("ReadFile %d: %q, %v", k, b, err)
				}
			})
			errs <- msg
		}()
		if msg := <-errs; msg != "" {
			if bad++; bad < 10 {
				t.Errorf("call %d (depth %d): %s", i, i%40, msg)
			}
		}
	}
}
