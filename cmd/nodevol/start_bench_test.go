package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// startCompare is another nodevol binary whose `nodevol rm` runs in the
// same rotation (the one-binary design, which linked the agent: a build
// of an older commit), so that the trade can be measured again.
var startCompare = flag.String("start-compare", "", "also start `NODEVOL rm` of this other nodevol build in BenchmarkStart")

// BenchmarkStart execs whole processes and waits for them: what a user
// running `nodevol rm` pays before any work is done (exec, the runtime's
// start, package initialisation, exit), against the baselines a user
// would compare it with: a Go program whose main does nothing (the floor
// for any Go binary) and rm -f (which, like nodevol rm, succeeds on a path
// that does not exist). `nodevol version` (which also probes the kernel's
// features) and the agent's start (`nodevol-agent --version`: the HTTP,
// TLS and metrics packages' initialisation the CLI no longer pays) are
// there for information. Each iteration runs every program once, in an
// order that rotates, so that a machine whose load changes during the run
// weighs on all of them alike.
//
// Every binary is built the way a release builds it (-trimpath,
// CGO_ENABLED=0). Per program it reports the wall time and the process's
// own CPU time (user + system, which a busy machine disturbs less) per
// start in microseconds, and the CPU time as a multiple of the empty
// program's (-x).
//
//	go test -run '^$' -bench Start -benchtime 2000x ./cmd/nodevol
//	go test -run '^$' -bench Start -benchtime 2000x ./cmd/nodevol -args -start-compare /tmp/nodevol-one-binary
func BenchmarkStart(b *testing.B) {
	dir := b.TempDir()
	nodevol := filepath.Join(dir, "nodevol")
	build(b, ".", nodevol)
	agent := filepath.Join(dir, "nodevol-agent")
	build(b, "../nodevol-agent", agent)
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
		{"nodevol-rm", []string{nodevol, "rm", missing}},
		{"nodevol-version", []string{nodevol, "version"}},
		{"nodevol-agent-version", []string{agent, "--version"}},
		{"rm-f", []string{rm, "-f", missing}},
	}
	if *startCompare != "" {
		progs = append(progs, struct {
			name string
			argv []string
		}{"compare-rm", []string{*startCompare, "rm", missing}})
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
