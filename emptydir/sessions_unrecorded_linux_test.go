package emptydir

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// fullFilesystems are the filesystems a kubelet root lives on, each made
// fresh for a test on dir, with no reserve for root (ext4's reserved
// blocks would let this root test write where a pod could not).
var fullFilesystems = []struct {
	name  string
	mount func(t *testing.T, dir string)
}{
	{"tmpfs", func(t *testing.T, dir string) { mounttest.Tmpfs(t, dir, "size=512k") }},
	{"ext4", func(t *testing.T, dir string) {
		mounttest.Bind(t, mounttest.LoopFS(t, "ext4", 16<<20, "", "-q", "-F", "-m", "0"), dir)
	}},
	{"xfs", func(t *testing.T, dir string) {
		mounttest.Bind(t, mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f"), dir)
	}},
}

// TestSessionsStartedOnAFullFilesystem: a pod can keep the kubelet root's
// filesystem full when a nodevol process starts, so that it cannot write
// its session. It then adopts nothing itself, and a tmpfs planted while
// it runs must not count, for the next process (once the pod is evicted),
// as made while no nodevol process ran: whether the log was yet to be
// made (a node switched to nodevol) or was one in the format before slots
// (a node upgraded), whose sessions stay covered too. The log is whole
// again after the next process's start.
//
// Not here: a new log on XFS, where a full filesystem has no inode for
// the log either (see the package's known limits).
func TestSessionsStartedOnAFullFilesystem(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, fs := range fullFilesystems {
		for _, legacy := range []bool{false, true} {
			if fs.name == "xfs" && !legacy {
				continue
			}
			name := fs.name + "/new log"
			if legacy {
				name = fs.name + "/log before slots"
			}
			t.Run(name, func(t *testing.T) {
				logger := ktesting.NewLogger(t, ktesting.NewConfig())
				root := filepath.Join(t.TempDir(), "kubelet")
				mounttest.Build(t, filepath.Dir(root), "dir kubelet")
				fs.mount(t, root)
				mounttest.Build(t, root, "dir earlier", "dir planted")
				var earlier uint64
				if legacy {
					// A process of the earlier version ran while this tmpfs was made.
					mounttest.Tmpfs(t, filepath.Join(root, "earlier"), "size=64k")
					earlier = uniqueMountID(t, filepath.Join(root, "earlier"))
					boot, err := bootID()
					if err != nil {
						t.Fatal(err)
					}
					before, _ := json.Marshal(sessionLog{BootID: boot, Sessions: []session{{From: earlier - 1, To: earlier + 1}}})
					if err := os.WriteFile(filepath.Join(root, sessionsFileName), before, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				fill := filepath.Join(root, "pod-data")
				if _, err := mounttest.Fill(t, fill, 1<<40); !errors.Is(err, unix.ENOSPC) {
					t.Fatalf("filling the root's filesystem: %v; want ENOSPC", err)
				}
				first := startSessions(root, logger)
				if ok, _ := first.beforeNodevol(1); ok {
					t.Fatal("a process that could not write its session adopts")
				}
				mounttest.Tmpfs(t, filepath.Join(root, "planted"), "size=64k")
				planted := uniqueMountID(t, filepath.Join(root, "planted"))
				if err := first.heartbeat(); err != nil {
					t.Logf("heartbeat on a full filesystem: %v", err)
				}
				if err := os.Remove(fill); err != nil { // the pod is evicted
					t.Fatal(err)
				}
				// The first process dies; the next starts.
				kill(first)
				second := startSessions(root, logger)
				if ok, _ := second.beforeNodevol(planted); ok {
					l, err := readLockedSessions(root)
					t.Errorf("a tmpfs planted while a process that could not write its session ran counts as made while none ran (first: %v; log %+v, %v)", first.err, l, err)
				}
				if st, err := os.Stat(filepath.Join(root, sessionsFileName)); err != nil || st.Size() != 2*slotSize {
					t.Errorf("the log after the next start: %v, %v; want it whole again, %d bytes", st, err, 2*slotSize)
				}
				if legacy {
					if ok, _ := second.beforeNodevol(earlier); ok {
						t.Errorf("a tmpfs made while an earlier version's process ran counts as made while none ran (second: %v)", second.err)
					}
				}
			})
		}
	}
}

// TestSessionLogMarkedUnrecorded: a log being made whole is marked
// unrecorded (its size) until its slots are written and durable, so a
// process that dies in the middle of that write, over a log in the format
// before slots, leaves a log that the next process reads as unrecorded:
// everything before its start is nodevol's time, and it writes the log
// whole again.
func TestSessionLogMarkedUnrecorded(t *testing.T) {
	mounttest.RequireMounts(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	root := t.TempDir()
	mounttest.Build(t, root, "dir during")
	// The dying process's run, with a tmpfs planted in it.
	mounttest.Tmpfs(t, filepath.Join(root, "during"), "size=64k")
	during := uniqueMountID(t, filepath.Join(root, "during"))
	path := filepath.Join(root, sessionsFileName)
	if err := os.WriteFile(path, append([]byte(`{"bootID":"`), make([]byte, 5000)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, unrecordedSize); err != nil {
		t.Fatal(err)
	}
	s := startSessions(root, logger)
	if s.err != nil {
		t.Fatalf("start over a log marked unrecorded: %v", s.err)
	}
	if ok, _ := s.beforeNodevol(during); ok {
		t.Error("a tmpfs made before a log marked unrecorded counts as made while no nodevol process ran")
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 2*slotSize {
		t.Errorf("the log after start: %v, %v; want it whole, %d bytes", st, err, 2*slotSize)
	}
}

// TestSessionWrittenOnceTheFilesystemFrees: a process that could not
// write its session at start (a full filesystem) writes it, from its
// start, at its first heartbeat once the filesystem has room again, and
// holds it (a process started then takes it as running).
func TestSessionWrittenOnceTheFilesystemFrees(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, fs := range fullFilesystems {
		t.Run(fs.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig())
			root := filepath.Join(t.TempDir(), "kubelet")
			mounttest.Build(t, filepath.Dir(root), "dir kubelet")
			fs.mount(t, root)
			mounttest.Build(t, root, "dir planted")
			fill := filepath.Join(root, "pod-data")
			if _, err := mounttest.Fill(t, fill, 1<<40); !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling the root's filesystem: %v; want ENOSPC", err)
			}
			first := startSessions(root, logger)
			if first.err == nil {
				t.Fatal("start on a full filesystem succeeded; want its error")
			}
			mounttest.Tmpfs(t, filepath.Join(root, "planted"), "size=64k")
			planted := uniqueMountID(t, filepath.Join(root, "planted"))
			if err := os.Remove(fill); err != nil {
				t.Fatal(err)
			}
			if err := first.heartbeat(); err != nil {
				t.Fatalf("heartbeat once the filesystem has room: %v", err)
			}
			l := readSessions(t, root)
			if i := slices.IndexFunc(l.Sessions, func(p session) bool { return p.From <= first.mine.From && first.mine.To <= p.To }); i < 0 || first.mine.To <= planted {
				t.Errorf("log %+v after the heartbeat; want this process's session %+v, past %#x", l.Sessions, first.mine, planted)
			}
			mounttest.Build(t, root, "dir later")
			mounttest.Tmpfs(t, filepath.Join(root, "later"), "size=64k")
			later := uniqueMountID(t, filepath.Join(root, "later"))
			second := startSessions(root, logger)
			if ok, _ := second.beforeNodevol(later); ok {
				t.Error("a tmpfs planted after the heartbeat, while the first process still runs, counts as made while none ran")
			}
		})
	}
}
