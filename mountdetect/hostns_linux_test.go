package mountdetect

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

const (
	envNSHelper     = "NODEVOL_TEST_NS_HELPER"      // the helper's mode: "default" or "older-kernel"
	envNSHelperProc = "NODEVOL_TEST_NS_HELPER_PROC" // where the helper mounts a proc of its own PID namespace

	initialMntLink = "mnt:[4026531832]" // readlink of the initial mount namespace on Linux 6.18+
	initialPIDLink = "pid:[4026531836]" // readlink of the initial PID namespace
)

// kernelNumbers makes CheckMountNamespace believe the kernel does (or, as
// before Linux 6.18, does not) number the initial mount namespace.
func kernelNumbers(fixed bool) NamespaceOption {
	return namespaceOptionFunc(func(c *namespaceConfig) {
		c.byInode = func(self MountNamespaceID) MountNamespaceState { return stateByInode(self, fixed) }
	})
}

// pid1Only makes CheckMountNamespace tell by PID 1 alone, so the tests
// reach the "unknown" answers whatever the kernel and the namespace.
func pid1Only() NamespaceOption {
	return namespaceOptionFunc(func(c *namespaceConfig) {
		c.byInode = func(MountNamespaceID) MountNamespaceState { return MountNamespaceUnknown }
	})
}

// nsResult is a MountNamespace as a helper process prints it.
type nsResult struct {
	State, By   string
	Self, Host  uint64
	Err         string
	Hidden      bool // errors.Is(Err, ErrPID1Hidden)
	NotHostInit bool // errors.Is(Err, ErrNotHostInit)
}

func resultOf(ns MountNamespace) nsResult {
	r := nsResult{State: ns.State.String(), By: ns.By.String(), Self: ns.Self.Ino, Host: ns.Host.Ino,
		Hidden: errors.Is(ns.Err, ErrPID1Hidden), NotHostInit: errors.Is(ns.Err, ErrNotHostInit)}
	if ns.Err != nil {
		r.Err = ns.Err.Error()
	}
	return r
}

// TestNamespaceHelper is not a test: the tests below run the test binary
// again in other namespaces with this test selected, and read what it
// prints.
func TestNamespaceHelper(t *testing.T) {
	mode := os.Getenv(envNSHelper)
	if mode == "" {
		t.Skip("helper process for the mount namespace tests")
	}
	var opts []NamespaceOption
	if proc := os.Getenv(envNSHelperProc); proc != "" {
		// PID 1 of a new PID namespace, in a private mount namespace: a
		// proc filesystem of its own shows it as PID 1.
		if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			t.Fatalf("mount proc on %s: %v", proc, err)
		}
		opts = append(opts, HostProc(proc))
	}
	if mode == "older-kernel" {
		opts = append(opts, kernelNumbers(false))
	}
	b, err := json.Marshal(resultOf(CheckMountNamespace(opts...)))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("NSRESULT %s\n", b)
}

// runNSHelper runs TestNamespaceHelper in a child process: through prefix
// (nsenter ...) or with attr's namespaces.
func runNSHelper(t *testing.T, mode string, prefix []string, attr *syscall.SysProcAttr, env ...string) nsResult {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string(nil), prefix...), exe, "-test.run=^TestNamespaceHelper$", "-test.count=1", "-test.v")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), append(env, envNSHelper+"="+mode, "NODEVOL_TEST_NO_MOUNTNS=a namespace helper process")...)
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %q: %v\n%s", args, err, out)
	}
	for line := range strings.Lines(string(out)) {
		if js, ok := strings.CutPrefix(line, "NSRESULT "); ok {
			var r nsResult
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatal(err)
			}
			t.Logf("helper %s: %+v", mode, r)
			return r
		}
	}
	t.Fatalf("helper %q printed no result:\n%s", args, out)
	return nsResult{}
}

// pid1Readable reports whether this process can compare with PID 1 of
// /proc, PID 1 being the host's init: read the way readlink(1) does,
// not the way CheckMountNamespace does.
func pid1Readable() bool {
	pid, err := os.Readlink("/proc/1/ns/pid")
	_, err2 := os.Readlink("/proc/1/ns/mnt")
	return err == nil && err2 == nil && pid == initialPIDLink
}

func nsIno(t *testing.T, file string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestCheckMountNamespaceThisProcess: as root the tests run in the private
// mount namespace mounttest.Main creates, which is never the host's; a
// process whose namespace readlink shows as the initial one is the host's.
func TestCheckMountNamespaceThisProcess(t *testing.T) {
	ns := CheckMountNamespace()
	t.Logf("CheckMountNamespace() = %s: %s", dump(ns), ns)
	if want := nsIno(t, "/proc/thread-self/ns/mnt"); ns.Self.Ino != want {
		t.Errorf("Self = %s; want mnt:[%d]", ns.Self, want)
	}
	link, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case mounttest.InPrivateNamespace():
		if ns.State == MountNamespaceHost {
			t.Fatalf("in the private mount namespace of the tests: %s", ns)
		}
		if (pid1Readable() || kernelNumbersInitialMountNamespace()) && ns.State != MountNamespaceForeign {
			t.Errorf("State = %s; want foreign (PID 1 is readable, or the kernel numbers the initial namespace)", ns.State)
		}
	case link == initialMntLink:
		if ns.State != MountNamespaceHost {
			t.Errorf("State = %s in the initial mount namespace; want host", ns.State)
		}
	default:
		t.Logf("not in the private namespace and not in the initial one: nothing certain to check")
	}
	if ns.State == MountNamespaceUnknown && ns.Err == nil {
		t.Errorf("unknown without a reason: %s", dump(ns))
	}
}

// TestCheckMountNamespaceInNewNamespace: a child in a new mount namespace
// is not in the host's.
func TestCheckMountNamespaceInNewNamespace(t *testing.T) {
	mounttest.RequireRoot(t, "to create a mount namespace")
	r := runNSHelper(t, "default", nil, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS})
	if r.State == "host" {
		t.Fatalf("a child in a new mount namespace: %+v; want not host", r)
	}
	if (pid1Readable() || kernelNumbersInitialMountNamespace()) && r.State != "foreign" {
		t.Errorf("State = %s; want foreign", r.State)
	}
	if r.Self == nsIno(t, "/proc/thread-self/ns/mnt") {
		t.Errorf("the child reports this process's namespace mnt:[%d]", r.Self)
	}
}

// TestCheckMountNamespaceThisThread: the answer is about the namespace of
// the thread that asks, which is every goroutine's. /proc/self is the main
// thread's: a locked goroutine that unshared on it and exited (as
// mounttest.StartAttacker's can) leaves it in another namespace than the
// rest of the process, and a check through it would describe that one.
func TestCheckMountNamespaceThisThread(t *testing.T) {
	mounttest.RequireRoot(t, "to unshare a mount namespace")
	process := CheckMountNamespace()
	done := make(chan MountNamespace)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Errorf("unshare: %v", err)
			close(done)
			return
		}
		done <- CheckMountNamespace()
	}()
	thread, ok := <-done
	if !ok {
		return
	}
	if thread.Self == process.Self || thread.State == MountNamespaceHost {
		t.Errorf("on a thread in a new namespace: %s; want another namespace than the process's %s", dump(thread), process.Self)
	}
	if again := CheckMountNamespace(); again.Self != process.Self {
		t.Errorf("after that thread left: %s; want the process's %s", dump(again), process.Self)
	}
}

// TestCheckMountNamespaceInPIDNamespace: in a new PID namespace, with a
// proc of its own, PID 1 is the child itself, not the host's init: PID 1
// cannot tell (ErrNotHostInit); a kernel that numbers the initial mount
// namespace still can.
func TestCheckMountNamespaceInPIDNamespace(t *testing.T) {
	mounttest.RequireRoot(t, "to create PID and mount namespaces")
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS}
	}
	r := runNSHelper(t, "older-kernel", nil, attr(), envNSHelperProc+"="+t.TempDir())
	if r.State != "unknown" || !r.NotHostInit || r.Hidden {
		t.Errorf("before Linux 6.18: %+v; want unknown, ErrNotHostInit", r)
	}
	r = runNSHelper(t, "default", nil, attr(), envNSHelperProc+"="+t.TempDir())
	if !r.NotHostInit {
		t.Errorf("Err = %q; want ErrNotHostInit", r.Err)
	}
	if kernelNumbersInitialMountNamespace() && (r.State != "foreign" || r.By != "initial-inode" || r.Host != initialMountNamespaceIno) {
		t.Errorf("Linux 6.18+: %+v; want foreign by initial-inode", r)
	}
}

// TestCheckMountNamespaceInHostNamespace: the test binary run again in the
// namespace `go test` was started in — the host's — reports host.
func TestCheckMountNamespaceInHostNamespace(t *testing.T) {
	outer, nsenter := mounttest.HostNamespace(t)
	r := runNSHelper(t, "default", []string{nsenter, "--mount=" + outer, "--"}, nil)
	if r.State != "host" || r.Self != nsIno(t, outer) {
		t.Errorf("in the host's namespace %s: %+v; want host", outer, r)
	}
	if pid1Readable() && r.By != "pid1" {
		t.Errorf("By = %s; want pid1 (PID 1 is readable)", r.By)
	}
}

// TestCheckMountNamespaceFakeProc runs the PID 1 logic on proc trees made
// of files and of links to real namespace files, alone unless a case says
// how the kernel numbers the initial mount namespace.
func TestCheckMountNamespaceFakeProc(t *testing.T) {
	selfIno := nsIno(t, "/proc/thread-self/ns/mnt")
	selfPID, _ := os.Readlink("/proc/self/ns/pid")
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, proc string)
		opt     NamespaceOption
		check   func(t *testing.T, ns MountNamespace)
	}{
		{
			name:    "no PID 1",
			prepare: func(*testing.T, string) {},
			check: func(t *testing.T, ns MountNamespace) {
				wantUnknown(t, ns, fs.ErrNotExist)
				if errors.Is(ns.Err, ErrPID1Hidden) {
					t.Errorf("a directory that is not a proc filesystem hides nothing: %v", ns.Err)
				}
			},
		},
		{
			name:    "regular files",
			prepare: func(t *testing.T, proc string) { mounttest.Build(t, proc, "file 1/ns/pid x", "file 1/ns/mnt x") },
			check:   func(t *testing.T, ns MountNamespace) { wantUnknown(t, ns, ErrNotNamespace) },
		},
		{
			name: "a FIFO does not hang",
			prepare: func(t *testing.T, proc string) {
				mounttest.Build(t, proc, "dir 1/ns")
				if err := unix.Mkfifo(filepath.Join(proc, "1/ns/pid"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, ns MountNamespace) { wantUnknown(t, ns, ErrNotNamespace) },
		},
		{
			name:    "a namespace of another type",
			prepare: func(t *testing.T, proc string) { mounttest.Build(t, proc, "symlink 1/ns/pid /proc/self/ns/net") },
			check:   func(t *testing.T, ns MountNamespace) { wantUnknown(t, ns, ErrNotNamespace) },
		},
		{
			name:    "PID 1 is this process",
			prepare: func(t *testing.T, proc string) { mounttest.Build(t, proc, "symlink 1 /proc/thread-self") },
			check: func(t *testing.T, ns MountNamespace) {
				if selfPID != initialPIDLink {
					// The tests run in a container with a PID namespace of its own.
					wantUnknown(t, ns, ErrNotHostInit)
					return
				}
				if ns.State != MountNamespaceHost || ns.By != EvidencePID1 || ns.Host != ns.Self || ns.Err != nil {
					t.Errorf("%s; want host by pid1, Host == Self", dump(ns))
				}
			},
		},
		{
			name: "PID 1 is the parent, in another mount namespace",
			prepare: func(t *testing.T, proc string) {
				mounttest.OuterNamespace(t) // the parent is in the namespace go test was started in
				mounttest.Build(t, proc, fmt.Sprintf("symlink 1 /proc/%d", os.Getppid()))
			},
			check: func(t *testing.T, ns MountNamespace) {
				if selfPID != initialPIDLink {
					wantUnknown(t, ns, ErrNotHostInit)
					return
				}
				parent := nsIno(t, fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
				if ns.State != MountNamespaceForeign || ns.By != EvidencePID1 || ns.Host.Ino != parent || ns.Self.Ino != selfIno {
					t.Errorf("%s; want foreign by pid1, Host mnt:[%d], Self mnt:[%d]", dump(ns), parent, selfIno)
				}
			},
		},
		{
			name:    "no PID 1, on a kernel that numbers the initial mount namespace",
			prepare: func(*testing.T, string) {},
			opt:     kernelNumbers(true),
			check: func(t *testing.T, ns MountNamespace) {
				want := MountNamespaceForeign
				if selfIno == initialMountNamespaceIno {
					want = MountNamespaceHost
				}
				if ns.State != want || ns.By != EvidenceInitialInode || ns.Host.Ino != initialMountNamespaceIno || !errors.Is(ns.Err, fs.ErrNotExist) {
					t.Errorf("%s; want %s by initial-inode, Host mnt:[%d], Err (why not PID 1) ENOENT", dump(ns), want, uint64(initialMountNamespaceIno))
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := t.TempDir()
			tc.prepare(t, proc)
			opt := tc.opt
			if opt == nil {
				opt = pid1Only()
			}
			ns := CheckMountNamespace(HostProc(proc), opt)
			t.Logf("%s: %s", dump(ns), ns)
			tc.check(t, ns)
		})
	}
}

// dump shows every field (MountNamespace's String says it in words).
func dump(ns MountNamespace) string {
	return fmt.Sprintf("{State:%s By:%s Self:%s Host:%s Err:%v}", ns.State, ns.By, ns.Self, ns.Host, ns.Err)
}

// TestCheckMountNamespacePID1Hidden: where this process may not read PID
// 1's namespaces (not root; some sandboxes deny it to root too), PID 1
// alone cannot tell, and says why with ErrPID1Hidden.
func TestCheckMountNamespacePID1Hidden(t *testing.T) {
	ns := CheckMountNamespace(pid1Only())
	t.Logf("%s: %s", dump(ns), ns)
	if pid1Readable() {
		if ns.By != EvidencePID1 || ns.State == MountNamespaceUnknown {
			t.Errorf("%s; want an answer by pid1 (this process may read PID 1)", dump(ns))
		}
		return
	}
	wantUnknown(t, ns, ErrPID1Hidden)
	if !errors.Is(ns.Err, fs.ErrPermission) && !errors.Is(ns.Err, fs.ErrNotExist) {
		t.Errorf("Err = %v; want the permission error (or, with hidepid=invisible, ENOENT) it wraps", ns.Err)
	}
}

func wantUnknown(t *testing.T, ns MountNamespace, target error) {
	t.Helper()
	if ns.State != MountNamespaceUnknown || ns.By != EvidenceNone || !errors.Is(ns.Err, target) {
		t.Errorf("%s; want unknown, Err matching %v", dump(ns), target)
	}
	if ns.Host != (MountNamespaceID{}) {
		t.Errorf("Host = %s; want zero when unknown", ns.Host)
	}
	if !strings.HasPrefix(ns.String(), "cannot tell whether this is the host's mount namespace: ") {
		t.Errorf("String() = %q", ns.String())
	}
}

func TestStateByInode(t *testing.T) {
	initial, other := MountNamespaceID{Dev: 4, Ino: initialMountNamespaceIno}, MountNamespaceID{Dev: 4, Ino: 4026532176}
	for _, tc := range []struct {
		self  MountNamespaceID
		fixed bool
		want  MountNamespaceState
	}{
		{initial, true, MountNamespaceHost},
		{initial, false, MountNamespaceHost}, // no other namespace ever has that number
		{other, true, MountNamespaceForeign},
		{other, false, MountNamespaceUnknown}, // before Linux 6.18 the initial one could have it
	} {
		if got := stateByInode(tc.self, tc.fixed); got != tc.want {
			t.Errorf("stateByInode(%s, fixed=%v) = %s; want %s", tc.self, tc.fixed, got, tc.want)
		}
	}
}

func TestPID1Error(t *testing.T) {
	for _, tc := range []struct {
		err        error
		inProcFS   bool
		wantHidden bool
	}{
		{err: unix.EACCES, wantHidden: true},
		{err: unix.EPERM, inProcFS: true, wantHidden: true},
		{err: unix.ENOENT, inProcFS: true, wantHidden: true}, // hidepid=invisible
		{err: unix.ENOENT}, // not a proc filesystem
		{err: unix.ENOTDIR, inProcFS: true},
		{err: ErrNotNamespace, inProcFS: true},
	} {
		err := pid1Error(&os.PathError{Op: "open", Path: "/proc/1", Err: tc.err}, tc.inProcFS)
		if got := errors.Is(err, ErrPID1Hidden); got != tc.wantHidden {
			t.Errorf("pid1Error(%v, inProcFS=%v) = %v; hidden = %v, want %v", tc.err, tc.inProcFS, err, got, tc.wantHidden)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("pid1Error(%v) = %v; does not match the cause", tc.err, err)
		}
	}
}

func TestKernelAtLeast(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.44-fc-v769": true, "6.18": true, "6.18-rc1": true, "6.19.0": true, "7.0.1": true,
		"6.17.9-arch1": false, "6.1.0-28-amd64": false, "5.15.0": false, "": false, "6": false, "x.y": false,
	} {
		if got := kernelAtLeast(release, 6, 18); got != want {
			t.Errorf("kernelAtLeast(%q, 6, 18) = %v; want %v", release, got, want)
		}
	}
}

func TestMountNamespaceString(t *testing.T) {
	self, pid1 := MountNamespaceID{Ino: 4026532176}, MountNamespaceID{Ino: 4026531840}
	initial := MountNamespaceID{Ino: initialMountNamespaceIno}
	for _, tc := range []struct {
		ns   MountNamespace
		want string
	}{
		{MountNamespace{State: MountNamespaceHost, By: EvidencePID1, Self: pid1, Host: pid1}, "the host's mount namespace (mnt:[4026531840], PID 1's)"},
		{MountNamespace{State: MountNamespaceHost, By: EvidenceInitialInode, Self: initial, Host: initial}, "the host's mount namespace (mnt:[4026531832], the initial one)"},
		{MountNamespace{State: MountNamespaceForeign, By: EvidencePID1, Self: self, Host: pid1}, "not the host's mount namespace (this process: mnt:[4026532176]; PID 1: mnt:[4026531840])"},
		{MountNamespace{State: MountNamespaceForeign, By: EvidenceInitialInode, Self: self, Host: initial}, "not the host's mount namespace (this process: mnt:[4026532176]; the host's, the initial one: mnt:[4026531832])"},
		{MountNamespace{Err: ErrUnsupported}, "cannot tell whether this is the host's mount namespace: mountdetect: unsupported operation"},
	} {
		if got := tc.ns.String(); got != tc.want {
			t.Errorf("String() = %q; want %q", got, tc.want)
		}
	}
	for s, want := range map[MountNamespaceState]string{MountNamespaceUnknown: "unknown", MountNamespaceHost: "host", MountNamespaceForeign: "foreign"} {
		if b, err := s.MarshalText(); err != nil || string(b) != want {
			t.Errorf("MarshalText(%d) = %q, %v; want %q", int(s), b, err, want)
		}
	}
}
