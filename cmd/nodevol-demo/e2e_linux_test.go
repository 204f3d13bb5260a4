//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// binary is nodevol-demo, built from this package.
type binary struct{ path string }

// buildBinary builds nodevol-demo once for TestDemoBinary's subtests
// (clitest.Build).
func buildBinary(t *testing.T) binary {
	t.Helper()
	return binary{path: clitest.Build(t, ".")}
}

// run runs the binary (clitest.Exec) and returns its exit code and
// output, which it logs. cmdFn may adjust the command (environment,
// credentials) before it starts.
func (b binary) run(t *testing.T, cmdFn func(*exec.Cmd), args ...string) result {
	t.Helper()
	var r result
	r.code, r.stdout, r.stderr = clitest.Exec(t, b.path, cmdFn, args...)
	t.Logf("nodevol-demo %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	return r
}

// TestDemoBinary runs the built nodevol-demo end to end, as root in the
// private mount namespace it re-executes itself into, and as nobody:
// every promise it checks itself, its output, and nothing left behind.
func TestDemoBinary(t *testing.T) {
	bin := buildBinary(t)

	t.Run("demo", func(t *testing.T) {
		tmp := t.TempDir() // the demo's sandbox goes here; it must be empty afterwards
		start := time.Now()
		r := bin.run(t, func(c *exec.Cmd) { c.Env = append(os.Environ(), "TMPDIR="+tmp) })
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

	// Interrupted while a NAS is mounted in its private mount namespace,
	// the demo (re-executed in that namespace, the signal passed on by its
	// parent) still cleans up, and exits as a shell reports the signal.
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("demo interrupted by "+unix.SignalName(sig), func(t *testing.T) {
			mounttest.RequireRoot(t, "the demo mounts a NAS, in a private mount namespace, only as root")
			testDemoInterrupted(t, bin, sig)
		})
	}

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
		})
		r.wantCode(t, exitOK)
		wantDemoWithSymlink(t, r)
		wantEmptyDir(t, tmp)
	})
}

// wantRow fails unless the scan table has a row with exactly these
// columns (clitest.WantRow).
func wantRow(t *testing.T, out string, cols ...string) {
	t.Helper()
	clitest.WantRow(t, out, cols...)
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
		"    Danger, unknown and error (reason code, reason and mounts):\n      $VOL (danger: nested-mount)\n        1 mount beneath the volume",
		"        $VOL/nas (tmpfs from tmpfs)\n",
		" in-use, 1 danger, 0 unknown, 0 error), 0 problems, 0 leftovers\n    (exit status 1)\n",
		"  RemovePod(web); WaitForUnmount(web) gives up after its 1s timeout (context deadline exceeded);\n"+
			"  errors.As finds the *mountdetect.CrossesMountError of the last refusal:\n"+
			"    1 mount beneath the volume\n"+
			"    $VOL/nas (tmpfs from tmpfs)\n"+
			"    unmount it first (their data is not the volume's)\n",
		"  MountedVolumes(web): cache uncertain; the others were unmounted and removed\n",
		`The NAS is intact: $VOL/nas/important.txt still reads "`+demoNASData+`"`,
		"web's own files in $VOL and its ready marker are still there too",
		"$ umount $VOL/nas\n  WaitForUnmount(web), WaitForPodRemoval(web): ok after ",
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
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "1", "danger")
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "scratch", "Memory", "yes (tmpfs)", "0", "in-use")
	wantRow(t, r.stdout, demoDBUID, "kubernetes.io/empty-dir", "data", "Default", "no", "0", "ok")
	if _, err := os.Stat(demoHugePages); err == nil {
		wantContains(t, "demo output", r.stdout, ", huge HugePages-2Mi\n", "    web  huge     mounted  hugetlbfs rw,pagesize=2M\n")
		wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "huge", "HugePages-2Mi", "yes (hugetlbfs)", "0", "in-use")
	}
	wantDemoRestart(t, r)
}

func wantDemoWithSymlink(t *testing.T, r result) {
	t.Helper()
	wantContains(t, "demo output", r.stdout,
		"not root: Default volumes only, and no NAS mount; run as root to see a refused teardown.\n",
		"  AddPod(web): cache Default\n  AddPod(db):  data Default\n",
		"    web  cache  mounted\n    db   data   mounted\n",
		"$ROOT: 2 volumes (2 ok, 0 in-use, 0 danger, 0 unknown, 0 error), 0 problems, 0 leftovers\n    (exit status 0)\n",
		`The NAS is intact: $NAS/important.txt still reads "`+demoNASData+`"`,
		"OK: the teardown removed the link and never followed it",
	)
	if !regexp.MustCompile(`\n  RemovePod\(web\); WaitForUnmount\(web\), WaitForPodRemoval\(web\): ok after \d+ms; web's volume \(link included\) and pod directory are gone\n`).MatchString(r.stdout) {
		t.Errorf("demo output does not say web was torn down:\n%s", r.stdout)
	}
	wantRow(t, r.stdout, demoPodUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "0", "ok")
	wantRow(t, r.stdout, demoDBUID, "kubernetes.io/empty-dir", "data", "Default", "no", "0", "ok")
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
			"  RemovePod(db); WaitForUnmount(db), WaitForPodRemoval(db): ok; db's pod directory is gone\n"+
			"$ nodevol scan --root $ROOT\n",
	)
	// The demo runs in a private mount namespace as root (and the tests run
	// it in theirs), where scan warns that it is not the host's.
	if !regexp.MustCompile(`\n\$ nodevol scan --root \$ROOT\n(    nodevol scan: warning: not the host's mount namespace [^\n]*\n)?    \$ROOT: 0 volumes \(0 ok, 0 in-use, 0 danger, 0 unknown, 0 error\), 0 problems, 0 leftovers\n    \(exit status 0\)\n`).MatchString(r.stdout) {
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

func testDemoInterrupted(t *testing.T, bin binary, sig syscall.Signal) {
	tmp := t.TempDir()
	cmd := exec.Command(bin.path)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() }) // only if it hangs
	defer watchdog.Stop()

	// This line comes right before the demo waits a second for a teardown
	// that the NAS mount makes it refuse: the demo is then in the middle
	// of its work, its volumes set up and the NAS mounted.
	const marker = "web is deleted. The kubelet would now os.RemoveAll($VOL)"
	var out strings.Builder
	lines := bufio.NewScanner(stdout)
	for !strings.Contains(out.String(), marker) {
		if !lines.Scan() {
			cmd.Wait()
			t.Fatalf("the demo ended before %q:\n%s\nstderr:\n%s", marker, out.String(), stderr.String())
		}
		out.WriteString(lines.Text() + "\n")
	}
	if n := childMountsUnder(t, cmd.Process.Pid, tmp); n == 0 {
		t.Errorf("the re-executed demo has no mount under %s; the test would prove nothing", tmp)
	}

	start := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	out.Write(rest)
	err = cmd.Wait()
	took := time.Since(start)
	t.Logf("exit %v after %v\nstdout:\n%s\nstderr:\n%s", err, took, out.String(), stderr.String())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 128+int(sig) {
		t.Errorf("the demo ended with %v; want exit status %d (128+%s)", err, 128+int(sig), unix.SignalName(sig))
	}
	if took > 5*time.Second {
		t.Errorf("the demo took %v to stop; it should stop at once", took)
	}
	if want := "nodevol demo: interrupted by " + unix.SignalName(sig) + "; the sandbox "; !strings.HasPrefix(stderr.String(), want) ||
		!strings.HasSuffix(stderr.String(), " was cleaned up\n") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("stderr %q; want only %q... \"was cleaned up\" (the re-executed demo cleaned up itself)", stderr.String(), want)
	}
	wantEmptyDir(t, tmp)
	if mounts, err := mountPointsUnder(tmp); err != nil || len(mounts) > 0 {
		t.Errorf("mounts left under %s: %q (%v)", tmp, mounts, err)
	}
}

// childMountsUnder counts the mounts under dir that the children of pid
// (the re-executed demo) see in their mount namespace.
func childMountsUnder(t *testing.T, pid int, dir string) int {
	t.Helper()
	// The child was forked by whichever thread of the Go program ran the
	// fork: look in every thread's list.
	children, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(children) == 0 {
		t.Logf("cannot list the children of %d (%v): not counting their mounts", pid, err)
		return -1
	}
	n := 0
	for _, c := range children {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		for child := range strings.FieldsSeq(string(b)) {
			infos, err := os.ReadFile("/proc/" + child + "/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			n += strings.Count(string(infos), " "+dir+"/")
		}
	}
	return n
}

// TestDemoOutputClosed: the reader of the demo's output goes away
// ("nodevol-demo | head -1"), so its next write meets a closed pipe
// (SIGPIPE). Without root (as nobody when the test runs as root), where
// the demo's sandbox is a plain directory under $TMPDIR that only the demo
// itself removes, it still removes it and exits with 141 (128+SIGPIPE),
// quietly; as root, its parent removes what the re-executed demo left.
// Closed before the demo starts, the pipe fails its first write; closed
// after the first line, whichever write comes next.
func TestDemoOutputClosed(t *testing.T) {
	bin := buildBinary(t)
	for _, asRoot := range []bool{false, true} {
		for _, afterFirstLine := range []bool{false, true} {
			name := map[bool]string{false: "without root", true: "as root"}[asRoot] + map[bool]string{false: "/closed at start", true: "/closed after a line"}[afterFirstLine]
			t.Run(name, func(t *testing.T) {
				if asRoot {
					mounttest.RequireRoot(t, "the demo runs in a private mount namespace only as root")
				}
				tmp, err := os.MkdirTemp("", "nodevol-demo-test-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(tmp) }) // nothing is mounted under it
				if err := os.Chmod(tmp, 0o777); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(bin.path)
				cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "TMPDIR=" + tmp}
				if !asRoot && os.Geteuid() == 0 {
					cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
				}
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdout = w
				if !afterFirstLine {
					r.Close()
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				w.Close()
				watchdog := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() }) // only if it hangs
				defer watchdog.Stop()
				if afterFirstLine {
					line, err := bufio.NewReader(r).ReadString('\n')
					if err != nil {
						t.Fatalf("the demo's first line: %q, %v", line, err)
					}
					r.Close()
				}
				err = cmd.Wait()
				t.Logf("nodevol-demo with its output closed: %v\nstderr:\n%s", err, stderr.String())
				var exit *exec.ExitError
				switch {
				case errors.As(err, &exit) && !exit.Exited():
					t.Errorf("the demo died of %v; want it to catch SIGPIPE, clean up and exit", exit.Sys())
				case afterFirstLine && err == nil:
					// It wrote all its output before the pipe closed: no SIGPIPE.
				case exit == nil || exit.ExitCode() != 128+int(syscall.SIGPIPE):
					t.Errorf("the demo ended with %v; want exit status %d (128+SIGPIPE)", err, 128+int(syscall.SIGPIPE))
				case stderr.Len() > 0:
					t.Errorf("stderr %q; want nothing: nobody reads the output any more", stderr.String())
				}
				wantEmptyDir(t, tmp)
			})
		}
	}
}
