package emptydir

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestSessionsOfALogReplaced: an operator deletes the session log, or puts
// another file in its place, while a process runs. Its next heartbeat
// writes its sessions into the file now there, and it holds its session
// there (hold): a process that starts afterwards still takes it as
// running until its own start.
func TestSessionsOfALogReplaced(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	root := t.TempDir()
	mounttest.Build(t, root, "dir planted")
	first := startSessions(root, logger)
	if first.err != nil {
		t.Fatal(first.err)
	}
	if err := os.Remove(filepath.Join(root, sessionsFileName)); err != nil {
		t.Fatal(err)
	}
	if err := first.heartbeat(); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, filepath.Join(root, "planted"), "size=64k")
	planted := uniqueMountID(t, filepath.Join(root, "planted"))
	second := startSessions(root, logger)
	if second.err != nil {
		t.Fatal(second.err)
	}
	if ok, _ := second.beforeNodevol(planted); ok {
		t.Errorf("a tmpfs planted while a process ran, after its log was replaced, counts as made while none ran (log %+v)", readSessions(t, root))
	}
	// The first process runs until here: its hold on its session lives as
	// long as its sessions (the garbage collector would close it).
	runtime.KeepAlive(first)
}

// TestSessionLogReplacedWhileLocked: a heartbeat waiting for the log's
// lock while the log is deleted (and another process holds the lock on
// it) writes to the file then in the log's place, not to the deleted one.
func TestSessionLogReplacedWhileLocked(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	root := t.TempDir()
	s := startSessions(root, logger)
	if s.err != nil {
		t.Fatal(s.err)
	}
	other, done := heartbeatWaitingForLock(t, root, s) // the lock held by another process's heartbeat
	if err := os.Remove(filepath.Join(root, sessionsFileName)); err != nil {
		t.Fatal(err)
	}
	other.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l := readSessions(t, root)
	if len(l.Sessions) != 1 || l.Sessions[0] != s.mine {
		t.Errorf("log after the heartbeat: %+v; want this process's session, %+v", l.Sessions, s.mine)
	}
}

// heartbeatWaitingForLock locks root's session log as another process
// would, starts a heartbeat of s and returns once the heartbeat waits for
// the lock: the lock (Close releases it) and the heartbeat's outcome.
func heartbeatWaitingForLock(t *testing.T, root string, s *sessions) (*lockedLog, <-chan error) {
	t.Helper()
	boot, err := bootID()
	if err != nil {
		t.Fatal(err)
	}
	other, err := lockSessionLog(root, boot)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(other.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.heartbeat() }()
	waitForFlockWaiter(t, st.Ino)
	return other, done
}

// waitForFlockWaiter waits until /proc/locks shows a process blocked on
// an flock of the file with inode ino.
func waitForFlockWaiter(t *testing.T, ino uint64) {
	t.Helper()
	suffix := fmt.Sprintf(":%d ", ino)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		f, err := os.Open("/proc/locks")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "-> FLOCK") && strings.Contains(line+" ", suffix) {
				f.Close()
				return
			}
		}
		f.Close()
	}
	t.Fatal("the heartbeat never waited for the lock")
}

// TestSessionsAnswerWhileTheLogIsLocked: SetUp asks the sessions whether
// a mount was made before nodevol while a heartbeat waits for the log's
// lock, which another process holds (stopped, or writing to a slow disk):
// the answer does not wait for the lock.
func TestSessionsAnswerWhileTheLogIsLocked(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	s := startSessions(root, ktesting.NewLogger(t, ktesting.NewConfig()))
	if s.err != nil {
		t.Fatal(s.err)
	}
	other, done := heartbeatWaitingForLock(t, root, s)
	err := mounttest.Within(t, 10*time.Second, "beforeNodevol while a heartbeat waits for the log's lock", func() error {
		s.beforeNodevol(1)
		s.placedBefore(1, filepath.Join(root, "x"))
		return nil
	})
	other.Close()
	if herr := <-done; herr != nil {
		t.Fatal(herr)
	}
	if err != nil {
		t.Fatal(err)
	}
}
