package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// requireForeignNamespace skips the test (fails it under CI=true) unless
// this process runs in a mount namespace CheckMountNamespace can tell is
// not the host's: the private one mounttest.Main creates, as root.
func requireForeignNamespace(t *testing.T) mountdetect.MountNamespace {
	t.Helper()
	mounttest.RequireMounts(t)
	ns := mountdetect.CheckMountNamespace()
	if ns.State != mountdetect.MountNamespaceForeign {
		mounttest.Skip(t, "the private namespace of the tests cannot be told from the host's here: %s", ns)
	}
	return ns
}

// wantNamespaceRefusal checks the human output of rm or teardown refused
// in ns.
func wantNamespaceRefusal(t *testing.T, r result, cmd string, ns mountdetect.MountNamespace, dryRun bool) {
	t.Helper()
	r.wantCode(t, ExitError)
	head := "nodevol " + cmd + ": refused: " + ns.String() + "; nothing was changed\n"
	if dryRun {
		head = "nodevol " + cmd + ": would refuse: " + ns.String() + "; nothing would be changed\n"
	}
	if !strings.HasPrefix(r.stderr, head) {
		t.Errorf("stderr does not start with %q:\n%s", head, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "would detach it on the host", allowForeign)
	if r.stdout != "" {
		t.Errorf("stdout = %q; want nothing", r.stdout)
	}
}

// TestRmRefusedInForeignNamespace: in a mount namespace other than the
// host's, rm (and its dry run, which says what rm would do) refuses and
// deletes nothing; --allow-foreign-mount-namespace lets it go on.
func TestRmRefusedInForeignNamespace(t *testing.T) {
	ns := requireForeignNamespace(t)
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Sentinels(t, vol)
	before := mounttest.Snapshot(t, base)

	wantNamespaceRefusal(t, nodevol(t, "rm", vol), "rm", ns, false)
	wantNamespaceRefusal(t, nodevol(t, "rm", "--workers", "4", vol, "relative"), "rm", ns, false)
	wantNamespaceRefusal(t, nodevol(t, "rm", "--dry-run", vol), "rm", ns, true)
	mounttest.Intact(t, base, before)

	r := nodevol(t, "rm", "--json", vol, "relative")
	r.wantCode(t, ExitError)
	objs := jsonLines(t, r.stdout, withError(rmKeys)...)
	if len(objs) != 2 {
		t.Fatalf("got %d JSON lines, want one per path", len(objs))
	}
	for _, o := range objs {
		mns, _ := o["mountNamespace"].(map[string]any)
		if mns["state"] != "foreign" || mns["reason"] != ns.String() || o["removed"] != false || o["refused"] != false ||
			!strings.Contains(o["error"].(string), "refusing to change anything") {
			t.Errorf("rm --json in a foreign namespace = %v; want an error, mountNamespace foreign", o)
		}
	}
	if r.stderr != "" {
		t.Errorf("stderr = %q; with --json everything is on stdout", r.stderr)
	}
	mounttest.Intact(t, base, before)

	r = nodevol(t, "rm", allowForeign, "--json", vol)
	r.wantCode(t, ExitOK)
	objs = jsonLines(t, r.stdout, rmKeys...)
	if len(objs) != 1 || objs[0]["removed"] != true || objs[0]["mountNamespace"].(map[string]any)["state"] != "foreign" {
		t.Errorf("rm %s --json = %v; want removed, mountNamespace foreign", allowForeign, objs)
	}
	mustNotExist(t, vol)
}

// TestTeardownRefusedInForeignNamespace: the same for teardown, whose
// refusal keeps the ready marker and metadata too.
func TestTeardownRefusedInForeignNamespace(t *testing.T) {
	ns := requireForeignNamespace(t)
	k := newKubelet(t, mounttest.RealTempDir(t))
	vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
	mounttest.Build(t, vol, "file index.db scratch")
	before := mounttest.Snapshot(t, k.root)

	wantNamespaceRefusal(t, nodevol(t, "teardown", vol), "teardown", ns, false)
	wantNamespaceRefusal(t, nodevol(t, "teardown", "--dry-run", vol), "teardown", ns, true)
	r := nodevol(t, "teardown", "--json", vol)
	r.wantCode(t, ExitError)
	objs := jsonLines(t, r.stdout, withError(teardownKeys)...)
	if len(objs) != 1 || objs[0]["done"] != false || objs[0]["mountNamespace"].(map[string]any)["state"] != "foreign" {
		t.Errorf("teardown --json in a foreign namespace = %v; want not done, mountNamespace foreign", objs)
	}
	mounttest.Intact(t, k.root, before)

	r = nodevol(t, "teardown", allowForeign, vol)
	r.wantCode(t, ExitOK)
	mustNotExist(t, vol)
}

// TestCheckScanWarnInForeignNamespace: check and scan answer all the same,
// with one warning line on stderr, or the mountNamespace field with --json
// (and nothing on stderr).
func TestCheckScanWarnInForeignNamespace(t *testing.T) {
	ns := requireForeignNamespace(t)
	k := newKubelet(t, mounttest.RealTempDir(t))
	vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
	warning := func(cmd string) string {
		return "nodevol " + cmd + ": warning: " + ns.String() + "; a mount made only in the host's mount namespace is not seen from here\n"
	}

	r := nodevol(t, "check", vol)
	r.wantCode(t, ExitOK)
	if r.stderr != warning("check") {
		t.Errorf("check: stderr %q; want %q", r.stderr, warning("check"))
	}
	wantContains(t, "stdout", r.stdout, "safe to remove")
	r = nodevol(t, "check", "--json", vol)
	objs := jsonLines(t, r.stdout, checkKeys...)
	if len(objs) != 1 || objs[0]["mountNamespace"].(map[string]any)["state"] != "foreign" || r.stderr != "" {
		t.Errorf("check --json = %v, stderr %q; want mountNamespace foreign, nothing on stderr", objs, r.stderr)
	}

	r = nodevol(t, "scan", "--root", k.root)
	r.wantCode(t, ExitOK)
	if want := scanNamespaceLine(t, k.root); r.stderr != want || !strings.HasPrefix(want, "nodevol scan: warning: "+ns.String()+", and "+k.root+" is on a private mount") {
		t.Errorf("scan: stderr %q; want %q, a warning that the private root misses the host's later mounts", r.stderr, want)
	}
	r = nodevol(t, "scan", "--json", "--root", k.root)
	vols, _, _ := scanLines(t, r.stdout)
	if len(vols) != 1 || vols[0]["mountNamespace"].(map[string]any)["state"] != "foreign" || r.stderr != "" {
		t.Errorf("scan --json = %v, stderr %q; want mountNamespace foreign, nothing on stderr", vols, r.stderr)
	}
}

// In a foreign namespace, a kubelet root that is a slave of the host's
// (mountPropagation HostToContainer) sees the host's later mounts: scan
// says so in a note, not a warning, and --json has hostMountsVisible.
func TestScanNoteWhenTheRootReceivesMounts(t *testing.T) {
	ns := requireForeignNamespace(t)
	hostRoot, view, _ := hostAndContainerView(t, unix.MS_SLAVE)
	r := nodevol(t, "scan", "--root", view)
	r.wantCode(t, ExitOK)
	if want := scanNamespaceLine(t, view); r.stderr != want || !strings.HasPrefix(want, "nodevol scan: note: "+ns.String()+", but "+view+" is on a mount that receives the host's mounts (slave (master:") {
		t.Errorf("scan: stderr %q; want %q, a note that the root receives the host's mounts", r.stderr, want)
	}
	r = nodevol(t, "scan", "--json", "--root", view)
	vols, _, _ := scanLines(t, r.stdout)
	if len(vols) != 1 || vols[0]["mountNamespace"].(map[string]any)["hostMountsVisible"] != true || r.stderr != "" {
		t.Errorf("scan --json = %v, stderr %q; want mountNamespace.hostMountsVisible true, nothing on stderr", vols, r.stderr)
	}
	r = nodevol(t, "scan", "--json", "--root", hostRoot)
	vols, _, _ = scanLines(t, r.stdout)
	if len(vols) != 1 || vols[0]["mountNamespace"].(map[string]any)["hostMountsVisible"] != true {
		t.Errorf("scan --json of the shared root = %v; want hostMountsVisible true (shared receives too)", vols)
	}
}

// TestHostProc: --host-proc names the proc filesystem whose PID 1 is
// compared with. A proc tree whose PID 1 is this very process makes this
// namespace the host's: rm goes on without the flag and says nothing. One
// whose PID 1 cannot be compared with is an error, before anything is
// looked at.
func TestHostProc(t *testing.T) {
	if pid, err := os.Readlink("/proc/self/ns/pid"); err != nil || pid != "pid:[4026531836]" {
		mounttest.Skip(t, "the tests run in a PID namespace of their own (%s %v): PID 1 would not be the host's init", pid, err)
	}
	base := mounttest.RealTempDir(t)
	proc := filepath.Join(base, "proc")
	mounttest.Build(t, proc, "symlink 1 /proc/thread-self")
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a b")

	r := nodevol(t, "rm", "--host-proc", proc, vol)
	r.wantCode(t, ExitOK)
	if r.stdout != "removed "+vol+"\n" || r.stderr != "" {
		t.Errorf("rm with this process as PID 1: stdout %q, stderr %q; want removed, nothing on stderr", r.stdout, r.stderr)
	}
	mustNotExist(t, vol)

	mounttest.Build(t, vol, "file a b")
	for _, args := range [][]string{
		{"check", "--host-proc", base, vol},
		{"scan", "--host-proc", base, "--root", base},
		{"rm", "--host-proc", base, vol},
		{"teardown", "--dry-run", "--host-proc", base, vol},
	} {
		r := nodevol(t, args...)
		r.wantCode(t, ExitError)
		if want := "nodevol " + args[0] + ": --host-proc " + base + ": cannot compare with its PID 1: "; !strings.HasPrefix(r.stderr, want) {
			t.Errorf("stderr %q; want it to start with %q", r.stderr, want)
		}
		if r.stdout != "" {
			t.Errorf("stdout = %q; want nothing", r.stdout)
		}
	}
	r = nodevol(t, "check", "--host-proc", base+"/proc/..", vol)
	r.wantCode(t, ExitError)
	wantContains(t, "stderr", r.stderr, `--host-proc: invalid path "`+base+`/proc/..": has a ".." element`)
	if _, err := os.Stat(vol); err != nil {
		t.Errorf("a refused rm removed %s: %v", vol, err)
	}
}

const envHostHelper = "NODEVOL_TEST_HOST_NAMESPACE_NAS" // where the helper mounts its NAS

// TestHostNamespaceHelper is not a test: TestRmInForeignNamespaceSparesHostNAS
// runs the test binary again in a new mount namespace, the "host" of that
// test, where it mounts a NAS (a tmpfs with sentinel files) that the test's
// own namespace does not see. It holds the namespace until its stdin closes.
func TestHostNamespaceHelper(t *testing.T) {
	nas := os.Getenv(envHostHelper)
	if nas == "" {
		t.Skip("helper process for TestRmInForeignNamespaceSparesHostNAS")
	}
	if err := unix.Mount("tmpfs", nas, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount the NAS: %v", err)
	}
	mounttest.Sentinels(t, nas)
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
}

// TestRmInForeignNamespaceSparesHostNAS: rm run in a mount namespace other
// than the host's, with real namespaces. A "host" namespace (a helper
// process) has a NAS mounted in a volume; this namespace does not see it,
// so check calls the volume safe. rm, told the host's proc (a proc tree
// whose PID 1 is the helper), refuses and the NAS keeps every byte. With
// --allow-foreign-mount-namespace rm removes the volume here — and the
// kernel detaches the NAS on the "host": what the refusal is for.
func TestRmInForeignNamespaceSparesHostNAS(t *testing.T) {
	mounttest.RequireMounts(t)
	if pid, err := os.Readlink("/proc/self/ns/pid"); err != nil || pid != "pid:[4026531836]" {
		mounttest.Skip(t, "the tests run in a PID namespace of their own (%s %v): the helper would not pass for the host's init", pid, err)
	}
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	nas := filepath.Join(vol, "nas")
	mounttest.Build(t, vol, "file own.txt the volume's own", "dir nas")

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(exe, "-test.run=^TestHostNamespaceHelper$", "-test.count=1")
	helper.Env = append(os.Environ(), envHostHelper+"="+nas)
	helper.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); helper.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "READY\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	go io.Copy(io.Discard, stdout) // the rest of its test output

	// The helper's view, through its root.
	hostNAS := fmt.Sprintf("/proc/%d/root%s", helper.Process.Pid, nas)
	nasBefore := mounttest.Snapshot(t, hostNAS)
	if len(nasBefore) < 3 {
		t.Fatalf("the helper's NAS holds %v", nasBefore)
	}
	proc := filepath.Join(base, "proc")
	mounttest.Build(t, proc, fmt.Sprintf("symlink 1 /proc/%d", helper.Process.Pid))
	before := mounttest.Snapshot(t, vol)

	// From here the volume looks safe: the NAS is not in this mount table.
	r := nodevol(t, "check", "--host-proc", proc, vol)
	r.wantCode(t, ExitOK)
	wantContains(t, "stderr", r.stderr, "nodevol check: warning: not the host's mount namespace (this process: ")

	host := mountdetect.CheckMountNamespace(mountdetect.HostProc(proc))
	if host.State != mountdetect.MountNamespaceForeign || host.By != mountdetect.EvidencePID1 {
		t.Fatalf("CheckMountNamespace(HostProc(helper)) = %s; want foreign by PID 1", host)
	}
	wantNamespaceRefusal(t, nodevol(t, "rm", "--host-proc", proc, vol), "rm", host, false)
	mounttest.Intact(t, vol, before)
	mounttest.Intact(t, hostNAS, nasBefore)

	r = nodevol(t, "rm", "--host-proc", proc, allowForeign, vol)
	r.wantCode(t, ExitOK)
	mustNotExist(t, vol)
	if _, err := os.Lstat(hostNAS); err == nil {
		t.Errorf("%s is still there: the kernel was expected to detach the NAS on the host when rm removed its mount point here", hostNAS)
	}
}

const envRunArgs = "NODEVOL_TEST_RUN_ARGS" // the arguments TestRunHelper runs the command with, as JSON

// TestRunHelper is not a test: TestRmInHostNamespace runs the test binary
// again in another mount namespace with this test selected, to run the
// command there the way main does.
func TestRunHelper(t *testing.T) {
	js := os.Getenv(envRunArgs)
	if js == "" {
		t.Skip("helper process for TestRmInHostNamespace")
	}
	var args []string
	if err := json.Unmarshal([]byte(js), &args); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := run(args, &stdout, &stderr)
	out, err := json.Marshal(runResult{Code: code, Stdout: stdout.String(), Stderr: stderr.String()})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("RUNRESULT %s\n", out)
}

// runResult is a result as TestRunHelper prints it.
type runResult struct {
	Code           int
	Stdout, Stderr string
}

// TestRmInHostNamespace: run in the namespace go test was started in — the
// host's — check says nothing about namespaces and rm removes without being
// told to go on.
func TestRmInHostNamespace(t *testing.T) {
	outer, nsenter := mounttest.HostNamespace(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	inHost := func(args ...string) result {
		t.Helper()
		js, _ := json.Marshal(args)
		cmd := exec.Command(nsenter, "--mount="+outer, "--", exe, "-test.run=^TestRunHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), envRunArgs+"="+string(js), "NODEVOL_TEST_NO_MOUNTNS=run in the host's namespace")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nodevol %q in the host's namespace: %v\n%s", args, err, out)
		}
		for line := range strings.Lines(string(out)) {
			if js, ok := strings.CutPrefix(line, "RUNRESULT "); ok {
				var m runResult
				if err := json.Unmarshal([]byte(js), &m); err != nil {
					t.Fatal(err)
				}
				r := result{code: m.Code, stdout: m.Stdout, stderr: m.Stderr}
				t.Logf("nodevol %q in the host's namespace: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
				return r
			}
		}
		t.Fatalf("nodevol %q in the host's namespace printed no result:\n%s", args, out)
		return result{}
	}

	vol := filepath.Join(mounttest.RealTempDir(t), "vol")
	mounttest.Build(t, vol, "file a b")
	r := inHost("check", vol)
	r.wantCode(t, ExitOK)
	if r.stderr != "" {
		t.Errorf("check in the host's namespace: stderr %q; want nothing", r.stderr)
	}
	r = inHost("rm", "--json", vol)
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, rmKeys...)
	if len(objs) != 1 || objs[0]["removed"] != true || objs[0]["mountNamespace"].(map[string]any)["state"] != "host" {
		t.Errorf("rm --json in the host's namespace = %v; want removed, mountNamespace host", objs)
	}
	mustNotExist(t, vol)
}
