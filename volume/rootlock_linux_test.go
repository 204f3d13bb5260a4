package volume

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

func testLayout(t *testing.T) Layout {
	t.Helper()
	l, err := NewLayout(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLockRoot: a second holder of one owner's lock gets a
// *RootLockedError naming the first (PID, program, since when); owners of
// other kinds do not conflict; once released, the lock can be taken again.
func TestLockRoot(t *testing.T) {
	l := testLayout(t)
	since := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	first, err := LockRoot(l, LockVolumeManager, LockOptions{Program: "first-manager", Clock: clocktesting.NewFakePassiveClock(since)})
	if err != nil {
		t.Fatal(err)
	}
	wantHolder := LockHolder{Owner: LockVolumeManager, PID: os.Getpid(), Program: "first-manager", Since: since}
	if first.Holder() != wantHolder || first.Path() != filepath.Join(l.Root(), "nodevol-volume-manager.lock") {
		t.Errorf("first lock: holder %+v at %s; want %+v at <root>/nodevol-volume-manager.lock", first.Holder(), first.Path(), wantHolder)
	}
	_, err = LockRoot(l, LockVolumeManager, LockOptions{Program: "second-manager"})
	var locked *RootLockedError
	if !errors.As(err, &locked) || !errors.Is(err, ErrRootLocked) {
		t.Fatalf("second LockRoot = %v; want a *RootLockedError matching ErrRootLocked", err)
	}
	if locked.HolderErr != nil || !locked.Holder.Since.Equal(since) || locked.Holder.PID != os.Getpid() || locked.Holder.Program != "first-manager" || locked.Root != l.Root() || locked.Path != first.Path() {
		t.Errorf("second LockRoot: %+v; want the first holder %+v", locked, wantHolder)
	}
	for _, want := range []string{l.Root(), fmt.Sprintf("PID %d (first-manager) since 2026-11-27T08:00:00Z", os.Getpid()), "volume-manager lock"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second LockRoot's message %q does not contain %q", err, want)
		}
	}
	// Other kinds of owner, and the same driver on another root, are free.
	csiA, err := LockRoot(l, LockCSIDriver("a.example.com"), LockOptions{})
	if err != nil {
		t.Fatalf("a CSI driver's lock beside the volume manager's: %v", err)
	}
	defer csiA.Release()
	if _, err := LockRoot(l, LockCSIDriver("a.example.com"), LockOptions{}); !errors.Is(err, ErrRootLocked) {
		t.Errorf("a second lock of the same CSI driver = %v; want ErrRootLocked", err)
	}
	csiB, err := LockRoot(l, LockCSIDriver("b.example.com"), LockOptions{})
	if err != nil {
		t.Fatalf("another CSI driver's lock: %v", err)
	}
	defer csiB.Release()
	other, err := LockRoot(testLayout(t), LockVolumeManager, LockOptions{})
	if err != nil {
		t.Fatalf("the volume manager's lock on another root: %v", err)
	}
	defer other.Release()

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Errorf("a second Release = %v; want nil", err)
	}
	again, err := LockRoot(l, LockVolumeManager, LockOptions{Program: "second-manager"})
	if err != nil {
		t.Fatalf("LockRoot after Release: %v", err)
	}
	defer again.Release()
	st, err := os.Stat(again.Path())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v, %v; want mode 0600 (no other user may take a shared lock)", st.Mode(), err)
	}
}

// TestLockRootRefusesPlantedFiles: whatever is at the lock file's name and
// is not a lock file of this user's — a symlink, a FIFO, a hard link to
// another file, a directory — is an error, and nothing is written through
// it: the symlink's and the link's targets stay byte for byte, the FIFO
// does not block. Bad owner names are refused.
func TestLockRootRefusesPlantedFiles(t *testing.T) {
	const sentinel = "precious\n"
	for _, tc := range []struct {
		name    string
		plant   func(t *testing.T, lockPath, target string)
		wantErr error
	}{
		{"symlink", func(t *testing.T, p, target string) { mustNil(t, os.Symlink(target, p)) }, fsat.ErrSymlink},
		{"hard link", func(t *testing.T, p, target string) { mustNil(t, os.Link(target, p)) }, nil},
		{"fifo", func(t *testing.T, p, _ string) { mustNil(t, unix.Mkfifo(p, 0o600)) }, fsat.ErrNotRegular},
		{"directory", func(t *testing.T, p, _ string) { mustNil(t, os.Mkdir(p, 0o700)) }, unix.EISDIR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout(t)
			target := filepath.Join(l.Root(), "target")
			mustNil(t, os.WriteFile(target, []byte(sentinel), 0o644))
			lockPath := filepath.Join(l.Root(), lockFileName(LockVolumeManager))
			tc.plant(t, lockPath, target)
			done := make(chan error, 1)
			go func() {
				lk, err := LockRoot(l, LockVolumeManager, LockOptions{})
				lk.Release()
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("LockRoot over a %s is blocked", tc.name)
			}
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Errorf("LockRoot over a %s = %v; want an error matching %v", tc.name, err, tc.wantErr)
			}
			if b, err := os.ReadFile(target); err != nil || string(b) != sentinel {
				t.Errorf("the target of the %s: %q, %v; want %q", tc.name, b, err, sentinel)
			}
		})
	}
	for _, owner := range []string{"", "../x", "a/b", ".lock", "x\x00y", strings.Repeat("a", 101)} {
		if lk, err := LockRoot(testLayout(t), owner, LockOptions{}); err == nil {
			lk.Release()
			t.Errorf("LockRoot(owner %q) = nil; want an error", owner)
		}
	}
	if _, err := LockRoot(Layout{}, LockVolumeManager, LockOptions{}); !errors.Is(err, ErrInvalidRoot) {
		t.Errorf("LockRoot(zero Layout) = %v; want ErrInvalidRoot", err)
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const lockHelperEnv = "NODEVOL_TEST_LOCK_ROOT"

// TestLockRootHelperProcess is the other process of
// TestLockRootReleasedWhenTheHolderDies: it takes the lock, says so, and
// waits to be killed.
func TestLockRootHelperProcess(t *testing.T) {
	root := os.Getenv(lockHelperEnv)
	if root == "" {
		t.Skip("helper process for TestLockRootReleasedWhenTheHolderDies")
	}
	l, err := NewLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockRoot(l, LockVolumeManager, LockOptions{Program: "lock-helper"}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	// Sleep rather than select{}: a process whose goroutines all block
	// forever without a timer is stopped by the runtime's deadlock check
	// ("all goroutines are asleep"), which released the lock early.
	for {
		time.Sleep(time.Hour)
	}
}

// TestLockRootReleasedWhenTheHolderDies: the lock of a process killed with
// SIGKILL (no Release, no deferred function) is free at once: the kernel
// drops the flock with the process's descriptors. While it lives, the
// error names it.
func TestLockRootReleasedWhenTheHolderDies(t *testing.T) {
	l := testLayout(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockRootHelperProcess$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+l.Root())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	_, err = LockRoot(l, LockVolumeManager, LockOptions{})
	var locked *RootLockedError
	if !errors.As(err, &locked) || locked.Holder.PID != cmd.Process.Pid || locked.Holder.Program != "lock-helper" {
		t.Fatalf("LockRoot while the helper (PID %d) holds it = %v; want a *RootLockedError naming it", cmd.Process.Pid, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	lk, err := LockRoot(l, LockVolumeManager, LockOptions{})
	if err != nil {
		t.Fatalf("LockRoot after the holder was killed = %v; want the lock", err)
	}
	lk.Release()
}
