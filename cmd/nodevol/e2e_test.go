//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

		r := bin.run(t, nil, "rm", allowForeign, "--workers", "4", vol)
		r.wantCode(t, exitRefused)
		wantContains(t, "stderr", r.stderr, "refused "+vol+": 1 mount beneath it; nothing was deleted:\n  "+nas+" (tmpfs from tmpfs)\n")
		mounttest.Intact(t, base, before)

		mounttest.Unmount(t, nas)
		r = bin.run(t, nil, "rm", allowForeign, "--json", vol)
		r.wantCode(t, exitOK)
		wantContains(t, "stdout", r.stdout, `{"path":"`+vol+`","removed":true,"dryRun":false,"refused":false,"nestedMounts":[],"mountNamespace":{"state":"`)
		mustNotExist(t, vol)
	})

	t.Run("rm flag after path is still a flag", func(t *testing.T) {
		base := realTempDir(t)
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "file a b")
		before := mounttest.Snapshot(t, base)
		r := bin.run(t, nil, "rm", allowForeign, vol, "--dry-run")
		r.wantCode(t, exitOK)
		wantContains(t, "stdout", r.stdout, "would remove "+vol+"\n")
		mounttest.Intact(t, base, before)
	})

	t.Run("rm bad paths", func(t *testing.T) {
		r := bin.run(t, nil, "rm", allowForeign, "relative/path", "/", "")
		r.wantCode(t, exitError)
		wantContains(t, "stderr", r.stderr,
			`invalid path "relative/path": not absolute; nothing was touched`,
			`invalid path "/": refusing to remove the root directory; nothing was touched`,
			`invalid path "": empty path; nothing was touched`)
	})

	t.Run("dot-dot refused", func(t *testing.T) {
		testDotDot(t, func(t *testing.T, args ...string) result { return bin.run(t, nil, args...) })
	})

	t.Run("teardown", func(t *testing.T) { testTeardownCLI(t, bin) })
	t.Run("scan", func(t *testing.T) { testScanCLI(t, bin) })

	t.Run("demo", func(t *testing.T) {
		tmp := t.TempDir() // the demo's sandbox goes here; it must be empty afterwards
		start := time.Now()
		r := bin.run(t, func(c *exec.Cmd) { c.Env = append(os.Environ(), "TMPDIR="+tmp) }, "demo")
		took := time.Since(start)
		t.Logf("demo took %v", took)
		if took > 10*time.Second {
			t.Errorf("demo took %v; it should take a second or two", took)
		}
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
	wantContains(t, "demo output", r.stdout,
		"(in a private mount namespace: no mount made here can reach the host)\n",
		"  AddPod(web): cache Default, scratch Memory (sizeLimit 64Mi, pod limit 256Mi)",
		"    web  cache    mounted\n",
		"    web  scratch  mounted  tmpfs rw,size=65536k", // sizeLimit 64Mi beats the pod limit and allocatable
		"    db   data     mounted\n",
		"$ nodevol scan --root $ROOT\n",
		"    Unsafe to remove:\n      $VOL\n        1 mount beneath the volume",
		"        $VOL/nas (tmpfs from tmpfs)\n",
		" volumes, 1 unsafe, 0 problems, 0 leftovers\n    (exit status 1)\n",
		"  RemovePod(web); WaitForUnmount(web) gives up after its 1s timeout (context deadline exceeded);\n"+
			"  errors.As finds the *mountdetect.CrossesMountError of the last refusal:\n"+
			"    1 mount beneath the volume; unmount it first (their data is not the volume's)\n"+
			"    $VOL/nas (tmpfs from tmpfs)\n",
		"  MountedVolumes(web): cache uncertain; the others were unmounted and removed\n",
		`The NAS is intact: $VOL/nas/important.txt still reads "`+demoNASData+`"`,
		"web's own files in $VOL and its ready marker are still there too",
		"$ umount $VOL/nas\n  WaitForUnmount(web): ok after ",
		", at the next retry; web's volumes and pod directory are gone\n",
		"OK: the NAS was never touched",
	)
	// The first try and at least one retry were refused within the second.
	m := regexp.MustCompile(`\n  nodevol_teardown_refused_total\{plugin="kubernetes.io/empty-dir"\} = (\d+): the first try and (\d+) retr`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Errorf("demo output has no refused-teardown count:\n%s", r.stdout)
	} else if n, _ := strconv.Atoi(m[1]); n < 2 || m[2] != strconv.Itoa(n-1) {
		t.Errorf("refused %s times with %s retries; want at least 2 refusals (the backoff is 100ms, the wait 1s), retries one fewer", m[1], m[2])
	}
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "1", "UNSAFE")
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "scratch", "Memory", "yes (tmpfs)", "0", "safe (teardown unmounts it)")
	wantRow(t, r.stdout, demoDBUID, "kubernetes.io/empty-dir", "data", "Default", "no", "0", "safe")
	if _, err := os.Stat(demoHugePages); err == nil {
		wantContains(t, "demo output", r.stdout, ", huge HugePages-2Mi\n", "    web  huge     mounted  hugetlbfs rw,pagesize=2M\n")
		wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "huge", "HugePages-2Mi", "yes (hugetlbfs)", "0", "safe (teardown unmounts it)")
	}
	wantDemoRestart(t, r)
}

func wantDemoWithSymlink(t *testing.T, r result) {
	t.Helper()
	wantContains(t, "demo output", r.stdout,
		"not root: Default volumes only, and no NAS mount; run as root to see a refused teardown.\n",
		"  AddPod(web): cache Default\n  AddPod(db):  data Default\n",
		"    web  cache  mounted\n    db   data   mounted\n",
		"$ROOT: 2 volumes, 0 unsafe, 0 problems, 0 leftovers\n    (exit status 0)\n",
		`The NAS is intact: $NAS/important.txt still reads "`+demoNASData+`"`,
		"OK: the teardown removed the link and never followed it",
	)
	if !regexp.MustCompile(`\n  RemovePod\(web\); WaitForUnmount\(web\): ok after \d+ms; web's volume \(link included\) and pod directory are gone\n`).MatchString(r.stdout) {
		t.Errorf("demo output does not say web was torn down:\n%s", r.stdout)
	}
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "0", "safe")
	wantRow(t, r.stdout, demoDBUID, "kubernetes.io/empty-dir", "data", "Default", "no", "0", "safe")
	wantDemoRestart(t, r)
}

// wantDemoRestart checks what both demos share: both pods mounted, the
// restart, reconstruction, verification and the final, empty scan.
func wantDemoRestart(t *testing.T, r result) {
	t.Helper()
	if !regexp.MustCompile(`\n  MarkSourcesReady\(\); WaitForMount\(web\), WaitForMount\(db\): ok after \d+ms\n`).MatchString(r.stdout) {
		t.Errorf("demo output does not say both pods were mounted:\n%s", r.stdout)
	}
	wantContains(t, "demo output", r.stdout,
		"Restart: Manager 1 stops",
		"Manager 2 starts on the same $ROOT and reconstructs what it finds there:\n"+
			"  MountedVolumes(db): data uncertain (found on disk at start-up; state unknown until verified)\n"+
			"  Problems(): none\n",
		"  AddPod(db); MarkSourcesReady(); WaitForMount(db): ok, SetUp verified it: data mounted\n"+
			`  db's data.db still reads "`+demoDBData+`"`+"\n"+
			"  RemovePod(db); WaitForUnmount(db): ok; db's pod directory is gone\n"+
			"$ nodevol scan --root $ROOT\n",
	)
	// The demo runs in a private mount namespace as root (and the tests run
	// it in theirs), where scan warns that it is not the host's.
	if !regexp.MustCompile(`\n\$ nodevol scan --root \$ROOT\n(    nodevol scan: warning: not the host's mount namespace [^\n]*\n)?    \$ROOT: 0 volumes, 0 unsafe, 0 problems, 0 leftovers\n    \(exit status 0\)\n`).MatchString(r.stdout) {
		t.Errorf("demo output does not end with an empty scan:\n%s", r.stdout)
	}
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
