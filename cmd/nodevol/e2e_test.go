//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodevol/nodevol/internal/mounttest"
)

// binary is the nodevol command built from this package.
type binary struct{ path string }

// buildBinary builds the command once for TestCLI's subtests. The go
// command is found on PATH, where "go test" puts its own GOROOT/bin first.
// The directory is readable by everyone so that the binary can also run as
// an unprivileged user.
func buildBinary(t *testing.T) binary {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("cannot build nodevol: no go command on PATH: %v", err)
	}
	dir, err := os.MkdirTemp("", "nodevol-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // holds only the binary
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "nodevol")
	out, err := exec.Command(goCmd, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -o %s .: %v\n%s", bin, err, out)
	}
	return binary{path: bin}
}

// run runs the binary and returns its exit code and output. cmdFn may
// adjust the command (environment, credentials) before it starts.
func (b binary) run(t *testing.T, cmdFn func(*exec.Cmd), args ...string) result {
	t.Helper()
	cmd := exec.Command(b.path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if cmdFn != nil {
		cmdFn(cmd)
	}
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		r.code = exit.ExitCode()
	default:
		t.Fatalf("%s %q: %v\nstderr:\n%s", b.path, args, err, r.stderr)
	}
	t.Logf("nodevol %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	return r
}

// TestCLI runs the built binary end to end: argument handling, output and
// exit codes as an operator's shell sees them.
func TestCLI(t *testing.T) {
	bin := buildBinary(t)

	t.Run("usage", func(t *testing.T) {
		r := bin.run(t, nil)
		r.wantCode(t, exitError)
		wantContains(t, "stderr", r.stderr, "Usage:", "nodevol check", "nodevol rm", "nodevol teardown", "nodevol scan", "nodevol demo")
		bin.run(t, nil, "help").wantCode(t, exitOK)
	})

	t.Run("check", func(t *testing.T) {
		base := realTempDir(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a b")
		missing := filepath.Join(base, "missing")

		r := bin.run(t, nil, "check", vol, missing)
		r.wantCode(t, exitOK)
		wantContains(t, "stdout", r.stdout, vol+"\n  exists:        yes (directory)\n", "safe to remove", missing+"\n  exists:        no\n")

		r = bin.run(t, nil, "check", "--json", vol, missing)
		r.wantCode(t, exitOK)
		if objs := jsonLines(t, r.stdout, checkKeys...); len(objs) != 2 {
			t.Errorf("got %d JSON lines, want 2", len(objs))
		}
	})

	t.Run("check nested mounts", func(t *testing.T) {
		mounttest.RequireMounts(t)
		vol := filepath.Join(realTempDir(t), "vol")
		nas := filepath.Join(vol, "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		r := bin.run(t, nil, "check", vol)
		r.wantCode(t, exitRefused)
		wantContains(t, "stdout", r.stdout, "    "+nas+" (tmpfs from tmpfs)\n", "UNSAFE: 1 mount beneath it")
	})

	t.Run("rm refused, then removed", func(t *testing.T) {
		mounttest.RequireMounts(t)
		base := realTempDir(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file scratch x")
		nas := filepath.Join(vol, "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		mounttest.Sentinels(t, nas)
		before := mounttest.Snapshot(t, base)

		r := bin.run(t, nil, "rm", "--workers", "4", vol)
		r.wantCode(t, exitRefused)
		wantContains(t, "stderr", r.stderr, "refused "+vol+": 1 mount beneath it; nothing was deleted:\n  "+nas+" (tmpfs from tmpfs)\n")
		mounttest.Intact(t, base, before)

		mounttest.Unmount(t, nas)
		r = bin.run(t, nil, "rm", "--json", vol)
		r.wantCode(t, exitOK)
		wantContains(t, "stdout", r.stdout, `{"path":"`+vol+`","removed":true,"dryRun":false,"refused":false,"nestedMounts":[]}`+"\n")
		mustNotExist(t, vol)
	})

	t.Run("rm flag after path is still a flag", func(t *testing.T) {
		base := realTempDir(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a b")
		before := mounttest.Snapshot(t, base)
		r := bin.run(t, nil, "rm", vol, "--dry-run")
		r.wantCode(t, exitOK)
		wantContains(t, "stdout", r.stdout, "would remove "+vol+"\n")
		mounttest.Intact(t, base, before)
	})

	t.Run("rm bad paths", func(t *testing.T) {
		r := bin.run(t, nil, "rm", "relative/path", "/", "")
		r.wantCode(t, exitError)
		wantContains(t, "stderr", r.stderr,
			`invalid path "relative/path": not absolute; nothing was touched`,
			`invalid path "/": refusing to remove the root directory; nothing was touched`,
			`invalid path "": empty path; nothing was touched`)
	})

	t.Run("teardown", func(t *testing.T) { testTeardownCLI(t, bin) })
	t.Run("scan", func(t *testing.T) { testScanCLI(t, bin) })

	t.Run("demo", func(t *testing.T) {
		tmp := t.TempDir() // the demo's sandbox goes here; it must be empty afterwards
		start := time.Now()
		r := bin.run(t, func(c *exec.Cmd) { c.Env = append(os.Environ(), "TMPDIR="+tmp) }, "demo")
		t.Logf("demo took %v", time.Since(start))
		r.wantCode(t, exitOK)
		if os.Geteuid() == 0 {
			wantDemoWithNAS(t, r)
		} else {
			wantDemoWithSymlink(t, r)
		}
		wantEmptyDir(t, tmp)
	})

	t.Run("demo without root", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("skipping: already covered by the demo subtest (not root)")
		}
		mounttest.RequireRoot(t, "to drop privileges to nobody")
		tmp, err := os.MkdirTemp("", "nodevol-demo-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tmp) }) // nothing is mounted under it
		if err := os.Chmod(tmp, 0o777); err != nil {
			t.Fatal(err)
		}
		r := bin.run(t, func(c *exec.Cmd) {
			c.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "TMPDIR=" + tmp}
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}, "demo")
		r.wantCode(t, exitOK)
		wantDemoWithSymlink(t, r)
		wantEmptyDir(t, tmp)
	})
}

func wantDemoWithNAS(t *testing.T, r result) {
	t.Helper()
	const dir = "$POD/volumes/kubernetes.io~empty-dir/"
	wantContains(t, "demo output", r.stdout,
		"in a private mount namespace",
		"  "+dir+"scratch  tmpfs  rw,size=65536k", // sizeLimit 64Mi beats the pod limit and allocatable
		"$ nodevol scan --root $ROOT\n",
		"    Unsafe to remove:\n      $VOL\n        1 mount beneath the volume",
		"        $VOL/nas (tmpfs from tmpfs)\n",
		" volumes, 1 unsafe, 0 problems, 0 leftovers\n    (exit status 1)\n",
		"$ nodevol teardown $VOL\n    refused $VOL: 1 mount beneath the volume",
		"nothing was changed (the ready marker and metadata are kept):\n      $VOL/nas (tmpfs from tmpfs)\n    (exit status 1)\n",
		`The NAS is intact: $VOL/nas/important.txt still reads "`+demoNASData+`"`,
		"The pod's own files and the ready marker are still there too",
		"$ umount $VOL/nas\n$ nodevol teardown "+dir+"*\n    removed $VOL (a Default-medium volume on ",
		"    unmounted and removed "+dir+"scratch (Memory medium: tmpfs)\n",
		"$ROOT: 0 volumes, 0 unsafe, 0 problems, 1 leftover\n    (exit status 0)\n",
		"OK: ",
	)
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "1", "UNSAFE")
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "scratch", "Memory", "yes (tmpfs)", "0", "safe (teardown unmounts it)")
	if _, err := os.Stat(demoHugePages); err == nil {
		wantContains(t, "demo output", r.stdout,
			"  "+dir+"huge  hugetlbfs  rw,pagesize=2M\n",
			"    unmounted and removed "+dir+"huge (HugePages medium: hugetlbfs, pagesize 2Mi)\n")
		wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "huge", "HugePages-2Mi", "yes (hugetlbfs)", "0", "safe (teardown unmounts it)")
	}
	if strings.Contains(r.stdout, "PROMISE BROKEN") || r.stderr != "" {
		t.Errorf("demo stderr = %q, want nothing", r.stderr)
	}
}

func wantDemoWithSymlink(t *testing.T, r result) {
	t.Helper()
	wantContains(t, "demo output", r.stdout,
		"not root: skipping the tmpfs NAS mount; run as root to see a refused teardown",
		"$ nodevol scan --root $ROOT\n",
		"$ROOT: 1 volume, 0 unsafe, 0 problems, 0 leftovers\n    (exit status 0)\n",
		"$ nodevol teardown $POD/volumes/kubernetes.io~empty-dir/*\n    removed $VOL (a Default-medium volume on ",
		")\n    (exit status 0)\nThe volume is gone, link included.\n",
		`The NAS is intact: $NAS/important.txt still reads "`+demoNASData+`"`,
		"$ROOT: 0 volumes, 0 unsafe, 0 problems, 1 leftover\n    (exit status 0)\n",
		"OK: ",
	)
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "0", "safe")
	if strings.Contains(r.stdout, "PROMISE BROKEN") || r.stderr != "" {
		t.Errorf("demo stderr = %q, want nothing", r.stderr)
	}
}

func wantEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("the demo left %s behind in %s", e.Name(), dir)
	}
}
