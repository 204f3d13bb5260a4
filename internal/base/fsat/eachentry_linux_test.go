package fsat_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestEachEntryListsEveryEntryWhileSignalledAndChanged: a listing reports
// every entry that exists for its whole duration, while an attacker keeps
// creating, renaming and removing other entries of the directory and the
// process keeps receiving signals, on the filesystems a kubelet root is
// on. The directory needs several getdents64 buffers.
//
// The signals are what makes a getdents64 that returns less than its
// buffer no proof of the end of the directory on any filesystem:
// filldir64 (fs/readdir.c) stops filling the buffer at the next entry
// once a signal is pending for the thread and the call has returned a
// first entry, and the system call returns what it has. Whoever stops
// listing at such a short return misses the rest (the Go runtime, a CPU
// profiler and any process-wide signal interrupt threads in system
// calls); EachEntry asks again until getdents64 returns 0.
func TestEachEntryListsEveryEntryWhileSignalledAndChanged(t *testing.T) {
	for _, fs := range []struct {
		name  string
		mount func(t *testing.T) string
	}{
		{"tmpfs", func(t *testing.T) string {
			mounttest.RequireMounts(t)
			dir := t.TempDir()
			mounttest.Tmpfs(t, dir, "size=64m")
			return dir
		}},
		{"ext4", func(t *testing.T) string { return mounttest.LoopFS(t, "ext4", 64<<20, "") }},
		{"xfs", func(t *testing.T) string { return mounttest.LoopFS(t, "xfs", 320<<20, "") }},
	} {
		t.Run(fs.name, func(t *testing.T) {
			dir := filepath.Join(fs.mount(t), "dir")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			// 1,500 entries of 64-byte records: three 32 KiB buffers.
			const stable = 1500
			want := make(map[string]bool, stable)
			for i := range stable {
				name := fmt.Sprintf("stable-%04d-%s", i, "0123456789abcdefghijklmnopqrstuvwxyz")
				if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				want[name] = true
			}
			d, err := fsat.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()

			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // the attacker
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					a := filepath.Join(dir, fmt.Sprintf("churn-%d", i%64))
					b := filepath.Join(dir, fmt.Sprintf("churn-renamed-%d", i%64))
					os.WriteFile(a, nil, 0o600)
					os.Rename(a, b)
					os.Remove(b)
				}
			}()
			go func() { // signals: SIGURG, which the Go runtime ignores unless it asked for it
				defer wg.Done()
				pid := os.Getpid()
				for {
					select {
					case <-stop:
						return
					default:
					}
					syscall.Kill(pid, syscall.SIGURG)
				}
			}()
			defer func() { close(stop); wg.Wait() }()

			iterations := 2000
			if testing.Short() {
				iterations = 200
			}
			for it := range iterations {
				seen := make(map[string]bool, stable)
				err := d.EachEntry(func(e fsat.Entry) error {
					if want[e.Name] {
						seen[e.Name] = true
					}
					return nil
				})
				if err != nil {
					t.Fatalf("listing %d: %v", it, err)
				}
				if len(seen) != stable {
					for name := range want {
						if !seen[name] {
							t.Fatalf("listing %d of %d missed %d of the %d entries that existed throughout, %q among them", it, iterations, stable-len(seen), stable, name)
						}
					}
				}
			}
		})
	}
}
