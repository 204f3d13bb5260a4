package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkStart execs whole processes, one per iteration, and waits for
// them: what a user running `nodevol rm` pays before any work is done
// (exec, the runtime's start, package initialisation, exit), against the
// baselines a user would compare it with, in the same run: a Go program
// whose main does nothing (the floor for any Go binary) and rm -f (which,
// like nodevol rm, succeeds on a path that does not exist).
// nodevol is built the way a release builds it (-trimpath, CGO_ENABLED=0).
//
//	go test -run '^$' -bench Start -benchtime 2000x ./cmd/nodevol
func BenchmarkStart(b *testing.B) {
	dir := b.TempDir()
	nodevol := filepath.Join(dir, "nodevol")
	build(b, ".", nodevol)
	empty := filepath.Join(dir, "empty")
	src := filepath.Join(dir, "emptymain")
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module emptymain\n\ngo 1.26\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	build(b, src, empty)
	missing := filepath.Join(dir, "does-not-exist")
	rm, err := exec.LookPath("rm")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"empty-go-main", []string{empty}},
		{"nodevol-version", []string{nodevol, "version"}},
		{"nodevol-rm-missing", []string{nodevol, "rm", missing}},
		{"bin-rm-f-missing", []string{rm, "-f", missing}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				cmd := exec.Command(c.argv[0], c.argv[1:]...)
				if err := cmd.Run(); err != nil {
					b.Fatalf("%v: %v", c.argv, err)
				}
				cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			}
			// The process's own CPU time: on a busy machine, a steadier
			// figure than the wall time, which includes waiting for a CPU.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// build builds the main package in dir into out, as a release does.
func build(b *testing.B, dir, out string) {
	b.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build in %s: %v\n%s", dir, err, msg)
	}
}
