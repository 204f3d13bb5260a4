package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkStart execs whole processes and waits for them: what a user
// running `nodevol rm` pays before any work is done (exec, the runtime's
// start, package initialisation, exit), against the baselines a user
// would compare it with: a Go program whose main does nothing (the floor
// for any Go binary) and rm -f (which, like nodevol rm, succeeds on a path
// that does not exist). Each iteration runs every program once, in an
// order that rotates, so that a machine whose load changes during the run
// weighs on all of them alike.
//
// "cli-only" is the design not chosen, measured in the same run: nodevol
// without serve (built with serve's files replaced, by go build -overlay,
// as if the agent were a binary of its own), so without net/http, TLS,
// runtime/metrics and the metrics writer.
//
// Every binary is built the way a release builds it (-trimpath,
// CGO_ENABLED=0). Per program it reports the wall time and the process's
// own CPU time (user + system, which a busy machine disturbs less) per
// start in microseconds, and the CPU time as a multiple of the empty
// program's (-x).
//
//	go test -run '^$' -bench Start -benchtime 2000x ./cmd/nodevol
func BenchmarkStart(b *testing.B) {
	dir := b.TempDir()
	nodevol := filepath.Join(dir, "nodevol")
	build(b, ".", nodevol)
	cliOnly := filepath.Join(dir, "nodevol-cli-only")
	build(b, ".", cliOnly, "-overlay", withoutServe(b, dir))
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
	progs := []struct {
		name string
		argv []string
	}{
		{"empty-go-main", []string{empty}},
		{"nodevol-version", []string{nodevol, "version"}},
		{"nodevol-rm", []string{nodevol, "rm", missing}},
		{"cli-only-rm", []string{cliOnly, "rm", missing}},
		{"rm-f", []string{rm, "-f", missing}},
	}
	wall := make([]time.Duration, len(progs))
	cpu := make([]time.Duration, len(progs))
	for i := 0; b.Loop(); i++ {
		for j := range progs {
			k := (i + j) % len(progs)
			cmd := exec.Command(progs[k].argv[0], progs[k].argv[1:]...)
			start := time.Now()
			if err := cmd.Run(); err != nil {
				b.Fatalf("%v: %v", progs[k].argv, err)
			}
			wall[k] += time.Since(start)
			cpu[k] += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	for k, p := range progs {
		b.ReportMetric(us(wall[k]), p.name+"-wall-us")
		b.ReportMetric(us(cpu[k]), p.name+"-cpu-us")
		if k > 0 {
			b.ReportMetric(float64(cpu[k])/float64(cpu[0]), p.name+"-cpu-x")
		}
	}
}

// serveFiles are the files of internal/cli that only serve needs: the
// cli-only build replaces them with empty ones, and serve.go with a stub.
var serveFiles = []string{"servehttp.go", "servemetrics.go", "serveargs.go", "mountwatch_linux.go", "scaninc_linux.go"}

// serveStub stands for serve.go in the cli-only build.
const serveStub = `package cli

import (
	"fmt"
	"io"
)

const serveHelp = "serve is a program of its own in this build"

func runServe(fs *flagSet, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, serveHelp)
	return ExitError
}
`

// withoutServe writes, under dir, an overlay for go build that builds
// nodevol without serve, and returns its path.
func withoutServe(b *testing.B, dir string) string {
	b.Helper()
	cli, err := filepath.Abs("../../internal/cli")
	if err != nil {
		b.Fatal(err)
	}
	stub, blank := filepath.Join(dir, "serve.go"), filepath.Join(dir, "blank.go")
	if err := os.WriteFile(stub, []byte(serveStub), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(blank, []byte("package cli\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	replace := map[string]string{filepath.Join(cli, "serve.go"): stub}
	for _, f := range serveFiles {
		replace[filepath.Join(cli, f)] = blank
	}
	js, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		b.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, js, 0o644); err != nil {
		b.Fatal(err)
	}
	return overlay
}

// build builds the main package in dir into out, as a release does.
func build(b *testing.B, dir, out string, flags ...string) {
	b.Helper()
	args := append([]string{"build", "-trimpath", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build %v in %s: %v\n%s (the cli-only build: has serve's code moved? see serveFiles)", flags, dir, err, msg)
	}
}
