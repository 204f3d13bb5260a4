package emptydir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
)

// The session log: when, in unique mount IDs, a nodevol process has been
// running on this kubelet root since the node booted. Unique mount IDs
// (STATX_MNT_ID_UNIQUE, Linux 6.8) come from one counter that only grows
// until the next boot, so a mount's ID says whether it was made while a
// nodevol process was running (inside a session) or while none was
// (before the first, between two, after the last): only a mount made
// while none was can have been made by the kubelet nodevol took over.
const (
	sessionsFileName = "nodevol-sessions.json" // in the kubelet root, beside the kubelet's own files
	// maxSessionsSize bounds what is read of the log: more means it was
	// not written by nodevol, and then no mount is adopted.
	maxSessionsSize = 1 << 20
	// maxSessions bounds how many sessions one boot keeps apart: past it
	// the oldest are merged into one (what lay between them becomes
	// nodevol's time, never adoptable).
	maxSessions = 1000
	// heartbeatPeriod is how often a running process extends its
	// session: a process killed without notice leaves its session
	// ending at most this long before its death, so a mount made in that
	// last stretch counts as made while no nodevol process ran.
	heartbeatPeriod = 10 * time.Second
)

// session is one nodevol process's run: the unique mount IDs sampled when
// it started and at its last heartbeat (or when it stopped).
type session struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// sessionLog is the file's content.
type sessionLog struct {
	BootID   string    `json:"bootID"`
	Sessions []session `json:"sessions"`
}

// errNoUniqueMountIDs says the kernel has no unique mount IDs (Linux
// before 6.8): mount IDs are reused, so none says when its mount was made,
// and no mount is adopted.
var errNoUniqueMountIDs = fmt.Errorf("the kernel gives no unique mount IDs (Linux 6.8 and later do): %w", errors.ErrUnsupported)

// forceNoUniqueMountIDs makes the session log behave as on a kernel
// without unique mount IDs; set by this package's tests only.
var forceNoUniqueMountIDs bool

// sessions is this process's view of the log: the sessions of earlier
// processes of this boot and its own, which it extends until it stops.
type sessions struct {
	root string
	log  klog.Logger

	mu    sync.Mutex
	err   error     // why nothing is adopted (no unique IDs, an unreadable log); nil once started
	boot  string    // the boot's ID
	prior []session // earlier processes' sessions, oldest first
	mine  session   // this process's
	// placed is where each mount the kubelet's SetUp could have made (a
	// tmpfs from "tmpfs", a hugetlbfs from "nodev") was when this
	// process started, by classic mount ID, as the mount table names it;
	// tableRoot is the root as the table names it (placedBefore).
	placed    map[int]string
	tableRoot string

	done chan struct{} // closed when run returns
}

// startSessions opens this process's session in the log under root: it
// samples the mount ID counter, reads the log (a log of another boot is
// dropped), appends the new session and writes the log. A failure is
// kept: the returned sessions then adopts nothing and says why.
func startSessions(root string, log klog.Logger) *sessions {
	s := &sessions{root: root, log: log, done: make(chan struct{})}
	s.err = s.start()
	if s.err != nil {
		log.Info("Mounts made by a kubelet before nodevol will not be adopted", "reason", s.err)
	}
	return s
}

func (s *sessions) start() error {
	// A kubelet on a fresh node makes its root after its plugins are
	// initialised: made here as the kubelet makes it (the root is
	// trusted), the session starts now, not at a later retry that would
	// leave this process's first stretch outside every session.
	if err := os.MkdirAll(s.root, 0o750); err != nil {
		return err
	}
	id, err := sampleMountID(s.root)
	if err != nil {
		return err
	}
	boot, err := bootID()
	if err != nil {
		return err
	}
	// Read after the sample: a mount made before the session is in it.
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		return err
	}
	// The table names directories by their resolved paths; the root is
	// trusted (nothing below it is resolved here).
	if s.tableRoot, err = filepath.EvalSymlinks(s.root); err != nil {
		return err
	}
	s.placed = map[int]string{}
	for _, src := range []string{kubeletSource("tmpfs"), kubeletSource("hugetlbfs")} {
		for _, m := range tab.MountsFromSource(src) {
			s.placed[m.ID] = m.MountPoint
		}
	}
	d, err := fsat.OpenRoot(s.root)
	if err != nil {
		return err
	}
	defer d.Close()
	var l sessionLog
	switch b, err := d.ReadFile(sessionsFileName, maxSessionsSize); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", d.Join(sessionsFileName), err)
	default:
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("parse %s: %w", d.Join(sessionsFileName), err)
		}
	}
	if l.BootID != boot {
		l = sessionLog{BootID: boot} // the mounts of another boot are gone
	}
	for _, p := range l.Sessions {
		if p.From > p.To || p.To > id {
			return fmt.Errorf("%s: session %d-%d is not before the mount ID counter's %d: not written by nodevol on this boot", d.Join(sessionsFileName), p.From, p.To, id)
		}
	}
	if len(l.Sessions) >= maxSessions {
		merged := session{From: l.Sessions[0].From, To: l.Sessions[len(l.Sessions)-maxSessions/2].To}
		l.Sessions = append([]session{merged}, l.Sessions[len(l.Sessions)-maxSessions/2+1:]...)
	}
	s.boot, s.prior, s.mine = boot, l.Sessions, session{From: id, To: id}
	return s.write(d)
}

// write writes the log: the earlier sessions and this process's.
func (s *sessions) write(d *fsat.Dir) error {
	b, err := json.Marshal(sessionLog{BootID: s.boot, Sessions: append(append([]session(nil), s.prior...), s.mine)})
	if err != nil {
		return err
	}
	return d.WriteFileAtomic(sessionsFileName, b, 0o600)
}

// heartbeat extends this process's session to now.
func (s *sessions) heartbeat() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil
	}
	id, err := sampleMountID(s.root)
	if err != nil {
		return err
	}
	d, err := fsat.OpenRoot(s.root)
	if err != nil {
		return err
	}
	defer d.Close()
	s.mine.To = id
	return s.write(d)
}

// run beats until stop is closed, then ends the session with a last
// beat.
func (s *sessions) run(stop <-chan struct{}) {
	defer close(s.done)
	t := time.NewTicker(heartbeatPeriod)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			if err := s.heartbeat(); err != nil {
				s.log.Error(err, "Ending nodevol's session")
			}
			return
		}
		if err := s.heartbeat(); err != nil {
			s.log.Error(err, "Extending nodevol's session")
		}
	}
}

// beforeNodevol reports whether the mount with unique ID id was made
// while no nodevol process was running on this root in this boot (before
// the first, or between two), and if not, why not.
func (s *sessions) beforeNodevol(id uint64) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return false, s.err.Error()
	case id == 0:
		return false, "the mount has no unique ID"
	case id >= s.mine.From:
		return false, fmt.Sprintf("it was made while this nodevol process was running (mount ID %#x, the process started at %#x)", id, s.mine.From)
	}
	for _, p := range s.prior {
		if p.From <= id && id <= p.To {
			return false, fmt.Sprintf("it was made while an earlier nodevol process was running (mount ID %#x, in %#x-%#x)", id, p.From, p.To)
		}
	}
	return true, ""
}

// placedBefore reports whether the mount with classic ID id, made before
// this process started (beforeNodevol), was then on the directory dir (a
// path under the root) — wherever it is now — and if not, why not. A
// rename of a directory above a mount point, a RENAME_EXCHANGE, or a move
// of the mount takes it elsewhere without making a new one: its unique ID
// stays from before the watermark, so that alone would let whoever can
// write into pod directories put another volume's tmpfs in a volume's
// place while nodevol runs (or only while SetUp opens it). A mount made
// before the sample and still mounted was in the table read after it,
// under the same classic ID (classic IDs are unique among the mounts at
// any instant and never change for a mount).
func (s *sessions) placedBefore(id int, dir string) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err.Error()
	}
	rel, err := filepath.Rel(s.root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return false, fmt.Sprintf("%s is not under the kubelet root %s", dir, s.root)
	}
	want := filepath.Join(s.tableRoot, rel)
	was, ok := s.placed[id]
	switch {
	case !ok:
		return false, fmt.Sprintf("it was not in the mount table as a tmpfs or hugetlbfs of the kubelet's when this nodevol process started (mount ID %d)", id)
	case was != want:
		return false, fmt.Sprintf("it was at %s when this nodevol process started, not on the volume directory: renamed or moved since", was)
	}
	return true, ""
}

// sampleMountID returns the mount ID counter's value now: the unique ID
// of a mount made for the purpose (a detached, non-recursive clone of
// root's mount, gone when closed).
func sampleMountID(root string) (uint64, error) {
	if forceNoUniqueMountIDs {
		return 0, errNoUniqueMountIDs
	}
	var fd int
	err := fsat.Retry(func() (err error) {
		fd, err = unix.OpenTree(unix.AT_FDCWD, root, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		return err
	})
	if err != nil {
		return 0, &os.PathError{Op: "open_tree", Path: root, Err: err}
	}
	defer unix.Close(fd)
	mi, err := fsat.StatMount(fd, "", fsat.MountKey)
	if err != nil {
		return 0, &os.PathError{Op: "statx", Path: root, Err: err}
	}
	if mi.UniqueID == 0 {
		return 0, errNoUniqueMountIDs
	}
	return mi.UniqueID, nil
}

// bootID is the kernel's random ID of this boot.
func bootID() (string, error) {
	d, err := fsat.OpenRoot("/proc/sys/kernel/random")
	if err != nil {
		return "", err
	}
	defer d.Close()
	b, err := d.ReadFile("boot_id", 64)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("empty boot ID")
	}
	return id, nil
}
