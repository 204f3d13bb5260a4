//go:build linux

package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// binary is a command built from this module: nodevol (cmd/nodevol, a
// main around this package) or nodevol-demo (cmd/nodevol-demo).
type binary struct{ path string }

// nodevolPkg and demoPkg are the directories of the commands, relative to
// this package.
const (
	nodevolPkg = "../../cmd/nodevol"
	demoPkg    = "../../cmd/nodevol-demo"
)

// buildBinary builds nodevol once for TestCLI's subtests
// (clitest.Build).
func buildBinary(t *testing.T) binary {
	t.Helper()
	return buildProgram(t, nodevolPkg)
}

// buildProgram builds the command in the directory pkg (clitest.Build).
func buildProgram(t *testing.T, pkg string) binary {
	t.Helper()
	return binary{path: clitest.Build(t, pkg)}
}

// run runs the binary and returns its exit code and output, which it
// logs. cmdFn may adjust the command (environment, credentials) before it
// starts.
func (b binary) run(t *testing.T, cmdFn func(*exec.Cmd), args ...string) result {
	t.Helper()
	r := b.exec(t, cmdFn, args...)
	t.Logf("nodevol %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	return r
}

// runQuiet is run without the log (for the thousands of runs of a race
// test; a failure message quotes the run itself).
func (b binary) runQuiet(t *testing.T, args ...string) result {
	t.Helper()
	return b.exec(t, nil, args...)
}

func (b binary) exec(t *testing.T, cmdFn func(*exec.Cmd), args ...string) result {
	t.Helper()
	var r result
	r.code, r.stdout, r.stderr = clitest.Exec(t, b.path, cmdFn, args...)
	return r
}

// TestCLI runs the built binary end to end: argument handling, output and
// exit codes as an operator's shell sees them.
func TestCLI(t *testing.T) {
	bin := buildBinary(t)

	t.Run("usage", func(t *testing.T) {
		r := bin.run(t, nil)
		r.wantCode(t, ExitError)
		wantContains(t, "stderr", r.stderr, "Usage:", "nodevol check", "nodevol rm", "nodevol teardown", "nodevol scan", "nodevol usage", "nodevol version")
		if r.stdout != "" {
			t.Errorf("nodevol without a command: stdout %q, want nothing", r.stdout)
		}
		// Help asked for goes to stdout, so that "nodevol help | less" works.
		for _, args := range [][]string{{"help"}, {"--help"}, {"help", "rm"}, {"rm", "-h"}} {
			r = bin.run(t, nil, args...)
			r.wantCode(t, ExitOK)
			if !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
				t.Errorf("nodevol %q: stdout %q, stderr %q; want the usage on stdout only", args, r.stdout, r.stderr)
			}
		}
		r = bin.run(t, nil, "rm", "--dryrun", "x")
		r.wantCode(t, ExitError)
		if !strings.HasPrefix(r.stderr, "nodevol rm: unknown flag --dryrun (did you mean --dry-run?)\n") || r.stdout != "" {
			t.Errorf("nodevol rm --dryrun x: stdout %q, stderr %q; want the typo and the flag meant on stderr", r.stdout, r.stderr)
		}
	})

	// Built with -buildvcs=false, the binary says it does not know its
	// revision rather than guess one.
	t.Run("version", func(t *testing.T) {
		r := bin.run(t, nil, "version")
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "nodevol (devel)\n", "  revision: unknown (", "  modified: unknown\n")
		r = bin.run(t, nil, "version", "--json")
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, `"version":"(devel)","revision":null,"time":null,"modified":null,`)
	})

	t.Run("check", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a b")
		missing := filepath.Join(base, "missing")

		r := bin.run(t, nil, "check", vol, missing)
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, vol+"\n  exists:        yes (directory)\n", "safe to remove", missing+"\n  exists:        no\n")

		r = bin.run(t, nil, "check", "--json", vol, missing)
		r.wantCode(t, ExitOK)
		if objs := jsonLines(t, r.stdout, checkKeys...); len(objs) != 2 {
			t.Errorf("got %d JSON lines, want 2", len(objs))
		}
	})

	t.Run("check nested mounts", func(t *testing.T) {
		mounttest.RequireMounts(t)
		vol := filepath.Join(mounttest.RealTempDir(t), "vol")
		nas := filepath.Join(vol, "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		r := bin.run(t, nil, "check", vol)
		r.wantCode(t, ExitRefused)
		wantContains(t, "stdout", r.stdout, "    "+nas+" (tmpfs from tmpfs)\n", "UNSAFE: 1 mount beneath it")
	})

	t.Run("rm refused, then removed", func(t *testing.T) {
		mounttest.RequireMounts(t)
		base := mounttest.RealTempDir(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file scratch x")
		nas := filepath.Join(vol, "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		mounttest.Sentinels(t, nas)
		before := mounttest.Snapshot(t, base)

		r := bin.run(t, nil, "rm", allowForeign, "--workers", "4", vol)
		r.wantCode(t, ExitRefused)
		wantContains(t, "stderr", r.stderr, "refused "+vol+": 1 mount beneath it; nothing was deleted:\n  "+nas+" (tmpfs from tmpfs)\n")
		mounttest.Intact(t, base, before)

		mounttest.Unmount(t, nas)
		r = bin.run(t, nil, "rm", allowForeign, "--json", vol)
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, `{"path":"`+vol+`","removed":true,"dryRun":false,"refused":false,"nestedMounts":[],"mountNamespace":{"state":"`)
		mustNotExist(t, vol)
	})

	t.Run("rm flag after path is still a flag", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a b")
		before := mounttest.Snapshot(t, base)
		r := bin.run(t, nil, "rm", allowForeign, vol, "--dry-run")
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "would remove "+vol+"\n")
		mounttest.Intact(t, base, before)
	})

	t.Run("rm bad paths", func(t *testing.T) {
		r := bin.run(t, nil, "rm", allowForeign, "relative/path", "/", "")
		r.wantCode(t, ExitError)
		wantContains(t, "stderr", r.stderr,
			`invalid path "relative/path": not absolute; nothing was touched`,
			`invalid path "/": refusing to remove the root directory; nothing was touched`,
			`invalid path "": empty path; nothing was touched`)
	})

	// Without the permission to remove a tree, every directory rm could
	// not open is named, each on a line of its own, never "and N more".
	t.Run("rm as nobody reports every error", func(t *testing.T) {
		mounttest.RequireRoot(t, "to build a tree owned by root and run rm as nobody (uid 65534)")
		base, err := os.MkdirTemp("", "nodevol-perm-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(base) }) // nothing is mounted under it
		vol := filepath.Join(base, "vol")
		const locked = 6
		for i := range locked {
			mounttest.Build(t, vol, fmt.Sprintf("file locked%d/data x", i))
		}
		mounttest.Build(t, vol, "file free.txt x")
		for i := range locked {
			if err := os.Chmod(filepath.Join(vol, fmt.Sprintf("locked%d", i)), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		for _, dir := range []string{base, vol} {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}
		asNobody := func(c *exec.Cmd) {
			c.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}

		r := bin.run(t, asNobody, "rm", allowForeign, "--json", vol)
		r.wantCode(t, ExitError)
		objs := jsonLines(t, r.stdout, withError(rmKeys)...)
		if len(objs) != 1 {
			t.Fatalf("got %d JSON lines, want 1", len(objs))
		}
		errs, _ := objs[0]["errors"].([]any)
		if _, ok := objs[0]["moreErrors"]; ok {
			t.Errorf("moreErrors = %v for %d failures; want every failure listed", objs[0]["moreErrors"], locked)
		}

		r = bin.run(t, asNobody, "rm", allowForeign, vol)
		r.wantCode(t, ExitError)
		wantErrorLines(t, r.stderr, errs)
		for i := range locked {
			dir := filepath.Join(vol, fmt.Sprintf("locked%d", i))
			if want := "nodevol rm: openat " + dir + ": permission denied\n"; !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not name %s:\n%s", dir, r.stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
				t.Errorf("a file nobody may remove is gone: %v", err)
			}
		}
		if strings.Contains(r.stderr, "more error") {
			t.Errorf("stderr summarizes errors instead of listing them:\n%s", r.stderr)
		}
		mustNotExist(t, filepath.Join(vol, "free.txt"))

		// Past the 100 failures RemoveAll lists, its count of the rest is
		// printed after them.
		for i := locked; i < 103; i++ {
			dir := filepath.Join(vol, fmt.Sprintf("locked%d", i))
			mounttest.Build(t, dir, "file data x")
			if err := os.Chmod(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		r = bin.exec(t, asNobody, "rm", allowForeign, vol) // 103 lines: quoted by a failure
		r.wantCode(t, ExitError)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if len(lines) != 101 || strings.Count(r.stderr, ": permission denied\n") != 100 || lines[100] != "nodevol rm: ... and 3 more errors" {
			t.Errorf("stderr has %d lines, the last %q; want the 100 failures RemoveAll lists, then its count of the 3 more:\n%s", len(lines), lines[len(lines)-1], r.stderr)
		}
	})

	t.Run("dot-dot refused", func(t *testing.T) {
		testDotDot(t, func(t *testing.T, args ...string) result { return bin.run(t, nil, args...) })
	})

	t.Run("teardown", func(t *testing.T) { testTeardownCLI(t, bin) })
	t.Run("scan", func(t *testing.T) { testScanCLI(t, bin) })

}

// A binary built with VCS stamping reports the revision it was built from
// and whether the checkout was modified, as git sees them.
func TestVersionStamped(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("skipping: no git to compare with: %v", err)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nodevol")
	if out, err := exec.Command(goCmd, "build", "-buildvcs=true", "-o", bin, nodevolPkg).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "error obtaining VCS status") {
			t.Skipf("skipping: the go command cannot read this checkout's VCS state (another user's checkout?):\n%s", out)
		}
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("nodevol version --json: %v", err)
	}
	var v struct {
		Revision *string
		Time     *string
		Modified *bool
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if v.Revision == nil {
		// The go command stamps only where it finds a repository's root
		// directory: not in a linked git worktree (its .git is a file),
		// not outside a checkout. Then nothing is claimed.
		if v.Time != nil || v.Modified != nil {
			t.Errorf("no revision, yet time %v and modified %v: %s", v.Time, v.Modified, out)
		}
		t.Skipf("skipping: the go command stamped no VCS state here (a linked git worktree, or no checkout): %s", out)
	}
	head, err := exec.Command(git, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	status, err := exec.Command(git, "status", "--porcelain").Output()
	if err != nil {
		t.Fatalf("git status: %v", err)
	}
	if *v.Revision != strings.TrimSpace(string(head)) || v.Time == nil || v.Modified == nil || *v.Modified != (len(status) > 0) {
		t.Errorf("version --json = %s; want revision %s, a time, modified %v", out, head, len(status) > 0)
	}
}

// nodevol stays lean: the volume manager (reconciler) is the demo's
// (cmd/nodevol-demo), and linking it would more than double the
// operator's binary. reconciler/pendingops is not the Manager: the
// executor that nodevol teardown runs needs it.
func TestNodevolDoesNotLinkTheDemo(t *testing.T) {
	for _, dep := range nodevolDeps(t) {
		if dep == "github.com/nodevol/nodevol/reconciler" {
			t.Errorf("nodevol links %s; only nodevol-demo may", dep)
		}
	}
}

// TestNodevolDoesNotLinkClientGolang: every command of nodevol starts
// without Prometheus's client library and protobuf, whose package
// initialisation (a default registry with collectors reading the
// runtime's metric descriptions, protobuf descriptors) would run at every
// start, before any command: it made "nodevol rm" take three times the CPU
// of a Go program that does nothing (docs/benchmarks.md). serve writes
// its metrics with internal/base/promtext.
func TestNodevolDoesNotLinkClientGolang(t *testing.T) {
	for _, dep := range nodevolDeps(t) {
		for _, banned := range []string{"github.com/prometheus/", "google.golang.org/protobuf/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("nodevol links %s", dep)
			}
		}
	}
}

// TestNodevolDoesNotLinkHTTP: nodevol, the CLI, links no HTTP server,
// TLS or runtime/metrics: their package initialisation (TLS's curves and
// tables, the CPU feature probes) runs at every start of every command,
// whether the command uses them or not, and kept "nodevol rm" at twice the
// CPU of a Go program that does nothing (docs/benchmarks.md). They are
// the agent's, nodevol-agent, which "nodevol serve" runs. Nor any crypto/
// package: crypto/sha256 or crypto/rand alone brings Go's FIPS 140 module
// and its initialisation, about a tenth of that program's start;
// internal/base/digest is SHA-256, fsat.Random random bytes. Nor klog
// (with log/slog and os/user): the library logs through logr.
func TestNodevolDoesNotLinkHTTP(t *testing.T) {
	banned := []string{"net/http", "runtime/metrics", "k8s.io/klog/v2",
		"github.com/nodevol/nodevol/internal/base/promtext", "github.com/nodevol/nodevol/httpserver",
		"github.com/nodevol/nodevol/internal/agent"}
	for _, dep := range nodevolDeps(t) {
		if slices.Contains(banned, dep) || dep == "crypto" || strings.HasPrefix(dep, "crypto/") {
			t.Errorf("nodevol links %s", dep)
		}
	}
}

// nodevolDeps are the packages the nodevol binary links.
func nodevolDeps(t *testing.T) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-buildvcs=false", "-deps", nodevolPkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", nodevolPkg, err)
	}
	return strings.Fields(string(out))
}
