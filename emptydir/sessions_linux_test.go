package emptydir

import (
	"encoding/json"
	"errors"
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

func readSessions(t *testing.T, root string) sessionLog {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, sessionsFileName))
	if err != nil {
		t.Fatal(err)
	}
	var l sessionLog
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
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
