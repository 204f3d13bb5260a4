package emptydir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// uniqueMountID is the unique mount ID of the mount on path.
func uniqueMountID(t *testing.T, path string) uint64 {
	t.Helper()
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID_UNIQUE, &sx); err != nil {
		t.Fatal(err)
	}
	if sx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		mounttest.Skip(t, "the kernel gives no unique mount IDs (Linux 6.8)")
	}
	return sx.Mnt_id
}

// kill ends s as a process killed without notice: no last heartbeat,
// and its hold on its session released (the kernel drops a dead
// process's locks).
func kill(s *sessions) {
	s.beat.Lock()
	defer s.beat.Unlock()
	s.end()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.mine = errors.New("killed"), session{}
}

// readSessions reads root's session log, under its lock.
func readSessions(t *testing.T, root string) sessionLog {
	t.Helper()
	l, err := readLockedSessions(root)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func readLockedSessions(root string) (sessionLog, error) {
	boot, err := bootID()
	if err != nil {
		return sessionLog{}, err
	}
	lg, err := lockSessionLog(root, boot)
	if err != nil {
		return sessionLog{}, err
	}
	defer lg.Close()
	return lg.log, nil
}

// TestSessions: a mount made before the first nodevol process started,
// or between two, was made while none ran; one made while one ran
// (whatever later processes do) or after this one started never was.
func TestSessions(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	root := t.TempDir()
	mnt := func(name string) uint64 {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		mounttest.Tmpfs(t, p, "size=1m")
		return uniqueMountID(t, p)
	}
	before := mnt("before")
	first := startSessions(root, logger)
	if first.err != nil {
		t.Fatal(first.err)
	}
	during := mnt("during")
	if err := first.heartbeat(); err != nil {
		t.Fatal(err)
	}
	// The first process dies; the kubelet it replaced runs a while.
	kill(first)
	between := mnt("between")
	second := startSessions(root, logger)
	if second.err != nil {
		t.Fatal(second.err)
	}
	after := mnt("after")
	for _, tc := range []struct {
		name string
		id   uint64
		want bool
		why  string
	}{
		{"before the first", before, true, ""},
		{"while the first ran", during, false, "an earlier nodevol process"},
		{"between the two", between, true, ""},
		{"while this one runs", after, false, "this nodevol process"},
		{"no unique ID", 0, false, "no unique ID"},
	} {
		got, why := second.beforeNodevol(tc.id)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: beforeNodevol(%#x) = %v, %q; want %v, %q", tc.name, tc.id, got, why, tc.want, tc.why)
		}
	}
	l := readSessions(t, root)
	boot, _ := bootID()
	if l.BootID != boot || len(l.Sessions) != 2 || l.Sessions[0].To < during || l.Sessions[1].From <= between {
		t.Errorf("log = %+v; want this boot's two sessions, the first past %#x, the second after %#x", l, during, between)
	}
}

// TestSessionsOfAnotherBoot: a log of another boot is dropped (its
// mounts are gone); one that cannot be nodevol's (unparsable, sessions
// past the counter) makes nothing adoptable, and says why.
func TestSessionsOfAnotherBoot(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	for _, tc := range []struct {
		name, content, err string
	}{
		{"another boot", `{"bootID":"00000000-0000-0000-0000-000000000000","sessions":[{"from":1,"to":18446744073709551615}]}`, ""},
		{"unparsable", `{"bootID":`, "parse"},
		{"past the counter", `{"bootID":"BOOT","sessions":[{"from":1,"to":18446744073709551615}]}`, "not before the mount ID counter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			boot, err := bootID()
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(root, sessionsFileName), []byte(strings.ReplaceAll(tc.content, "BOOT", boot)), 0o600)
			s := startSessions(root, logger)
			if tc.err == "" {
				if s.err != nil || len(s.prior) != 0 {
					t.Fatalf("start = %v, prior %v; want the other boot's log dropped", s.err, s.prior)
				}
				return
			}
			if s.err == nil || !strings.Contains(s.err.Error(), tc.err) {
				t.Fatalf("start = %v; want an error saying %q", s.err, tc.err)
			}
			if ok, why := s.beforeNodevol(1); ok || why == "" {
				t.Errorf("beforeNodevol = %v, %q; want nothing adopted, with the reason", ok, why)
			}
		})
	}
}

// TestSessionsWithoutUniqueMountIDs: on a kernel without unique mount IDs
// no mount is adopted, and the reason says so.
func TestSessionsWithoutUniqueMountIDs(t *testing.T) {
	mounttest.RequireMounts(t)
	forceNoUniqueMountIDs = true
	t.Cleanup(func() { forceNoUniqueMountIDs = false })
	s := startSessions(t.TempDir(), ktesting.NewLogger(t, ktesting.NewConfig()))
	if !errors.Is(s.err, errNoUniqueMountIDs) {
		t.Fatalf("start = %v; want errNoUniqueMountIDs", s.err)
	}
	if ok, why := s.beforeNodevol(1); ok || !strings.Contains(why, "unique mount IDs") {
		t.Errorf("beforeNodevol = %v, %q; want nothing adopted for lack of unique mount IDs", ok, why)
	}
}

// TestSessionsBounded: a log of more sessions than kept merges the oldest
// into one, which covers everything between them.
func TestSessionsBounded(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	boot, _ := bootID()
	l := sessionLog{BootID: boot}
	for i := range maxSessions {
		l.Sessions = append(l.Sessions, session{From: uint64(10 * i), To: uint64(10*i + 1)})
	}
	b, _ := json.Marshal(l)
	os.WriteFile(filepath.Join(root, sessionsFileName), b, 0o600)
	s := startSessions(root, ktesting.NewLogger(t, ktesting.NewConfig()))
	if s.err != nil {
		t.Fatal(s.err)
	}
	if len(s.prior) > maxSessions/2+1 || s.prior[0].From != 0 {
		t.Fatalf("%d sessions kept, the first %+v; want at most %d, from 0", len(s.prior), s.prior[0], maxSessions/2+1)
	}
	if ok, _ := s.beforeNodevol(15); ok {
		t.Error("a mount between two merged sessions is adoptable; want it covered")
	}
}

// TestSessionsOnAFreshNode: a kubelet on a fresh node initialises its
// plugins before it makes its root; the session starts anyway.
func TestSessionsOnAFreshNode(t *testing.T) {
	mounttest.RequireMounts(t)
	root := filepath.Join(t.TempDir(), "kubelet")
	s := startSessions(root, ktesting.NewLogger(t, ktesting.NewConfig()))
	if s.err != nil {
		t.Fatalf("the session did not start on a root yet to be made: %v", s.err)
	}
	if l := readSessions(t, root); len(l.Sessions) != 1 {
		t.Errorf("sessions: %+v", l.Sessions)
	}
}

// TestSessionsOnAFullFilesystem: the kubelet root shares its filesystem
// with the pods' Default emptyDirs, which a pod can fill. A heartbeat
// then still extends the running process's session (the log is
// overwritten in place, in blocks it has had since it was made), so a
// tmpfs planted meanwhile (by a container with Bidirectional propagation)
// counts, for the next nodevol process, as made while one ran.
func TestSessionsOnAFullFilesystem(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, fs := range []struct {
		name  string
		mount func(t *testing.T, dir string)
	}{
		{"tmpfs", func(t *testing.T, dir string) { mounttest.Tmpfs(t, dir, "size=512k") }},
		{"ext4", func(t *testing.T, dir string) {
			mounttest.Bind(t, mounttest.LoopFS(t, "ext4", 16<<20, "", "-q", "-F"), dir)
		}},
		{"xfs", func(t *testing.T, dir string) {
			mounttest.Bind(t, mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f"), dir)
		}},
	} {
		t.Run(fs.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig())
			root := filepath.Join(t.TempDir(), "kubelet")
			mounttest.Build(t, filepath.Dir(root), "dir kubelet")
			fs.mount(t, root)
			planted := filepath.Join(root, "planted")
			mounttest.Build(t, root, "dir planted")
			first := startSessions(root, logger)
			if first.err != nil {
				t.Fatal(first.err)
			}
			fill := filepath.Join(root, "pod-data")
			if _, err := mounttest.Fill(t, fill, 1<<40); !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling the root's filesystem: %v; want ENOSPC", err)
			}
			mounttest.Tmpfs(t, planted, "size=64k")
			id := uniqueMountID(t, planted)
			if err := first.heartbeat(); err != nil {
				t.Fatalf("heartbeat on a full filesystem: %v", err)
			}
			if err := os.Remove(fill); err != nil { // the pod is evicted, say
				t.Fatal(err)
			}
			// The first process dies before another heartbeat.
			kill(first)
			second := startSessions(root, logger)
			if second.err != nil {
				t.Fatal(second.err)
			}
			if ok, _ := second.beforeNodevol(id); ok {
				t.Errorf("a tmpfs mounted while the first process ran, on a full filesystem, counts as made while no nodevol process ran (log %+v)", readSessions(t, root))
			}
		})
	}
}

// TestSessionsOfTwoProcesses: two processes beating on one root at once
// (a restart where the old one still beats; two plugins in one process)
// never lose each other's sessions: after each of its heartbeats, a
// process's session on disk reaches at least as far as it wrote, whatever
// the other writes meanwhile.
func TestSessionsOfTwoProcesses(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	root := t.TempDir()
	a := startSessions(root, logger)
	b := startSessions(root, logger)
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	const beats = 300
	errs := make(chan error, 2)
	for _, s := range []*sessions{a, b} {
		go func() {
			for range beats {
				if err := s.heartbeat(); err != nil {
					errs <- err
					return
				}
				s.mu.Lock()
				mine := s.mine
				s.mu.Unlock()
				l, err := readLockedSessions(root)
				if err != nil {
					errs <- err
					return
				}
				var got session
				for _, p := range l.Sessions {
					if p.From == mine.From {
						got = p
					}
				}
				if got.To < mine.To {
					errs <- fmt.Errorf("session %+v on disk after its heartbeat to %#x: the other process's write lost it", got, mine.To)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	l := readSessions(t, root)
	if len(l.Sessions) != 2 || l.Sessions[0] != a.mine || l.Sessions[1] != b.mine {
		t.Errorf("log %+v; want both sessions, %+v and %+v", l.Sessions, a.mine, b.mine)
	}
}

// TestSessionLogSlots: each write goes to the slot not holding the newest;
// a slot torn by a crash in the middle of its write (its checksum fails)
// leaves the other, which the reader takes; a log with neither intact
// makes nothing adoptable. A log in the format before slots (plain JSON)
// is read and converted, keeping its sessions.
func TestSessionLogSlots(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	root := t.TempDir()
	boot, err := bootID()
	if err != nil {
		t.Fatal(err)
	}
	old := session{From: 1, To: 2}
	b, _ := json.Marshal(sessionLog{BootID: boot, Sessions: []session{old}})
	path := filepath.Join(root, sessionsFileName)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSessions(root, logger)
	if s.err != nil {
		t.Fatal(s.err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 2*slotSize {
		t.Fatalf("log after start: %v, %v; want %d bytes", st, err, 2*slotSize)
	}
	if l := readSessions(t, root); len(l.Sessions) != 2 || l.Sessions[0] != old {
		t.Fatalf("sessions %+v; want the log's before slots kept, and this process's", l.Sessions)
	}
	if err := s.heartbeat(); err != nil {
		t.Fatal(err)
	}
	newest := s.mine
	// The newest write is sequence 2, in slot 0; tear it.
	tear := func(slot int) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{'X'}, int64(slot)*slotSize+sessionSlotHeader+3); err != nil {
			t.Fatal(err)
		}
	}
	tear(0)
	l := readSessions(t, root)
	if len(l.Sessions) != 2 || l.Sessions[1].From != newest.From || l.Sessions[1].To > newest.To {
		t.Fatalf("sessions with the newest slot torn: %+v; want the slot before (this session, up to %#x at most)", l.Sessions, newest.To)
	}
	if err := s.heartbeat(); err != nil { // writes slot 0 again, whole
		t.Fatal(err)
	}
	if l := readSessions(t, root); l.Sessions[1] != s.mine {
		t.Fatalf("sessions %+v after a heartbeat; want %+v", l.Sessions, s.mine)
	}
	tear(0)
	tear(1)
	next := startSessions(root, logger)
	if next.err == nil || !strings.Contains(next.err.Error(), "neither slot is intact") {
		t.Fatalf("start with both slots torn = %v; want an error", next.err)
	}
	if ok, _ := next.beforeNodevol(1); ok {
		t.Error("a mount is adoptable with an unreadable log")
	}
}
