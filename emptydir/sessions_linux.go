package emptydir

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/digest"
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
//
// The log is rewritten in place, never replaced: the kubelet root usually
// shares its filesystem with the pods' Default emptyDirs, which a pod can
// fill, and a heartbeat that needed a new block then would fail, ending the
// running process's session on disk early (a tmpfs planted meanwhile would
// count, for the next process, as made while none ran). So the file is
// written in full, zeros included, when it is made, and each heartbeat
// overwrites one of its two slots, alternately, with a sequence number and
// a checksum: a crash in the middle of a write leaves the other slot,
// which the reader then takes (the newest slot whose checksum holds). An
// overwrite needs no new block on ext4, XFS or tmpfs (it does on a
// copy-on-write filesystem such as Btrfs). Every read-modify-write holds
// an flock on the file, and each heartbeat merges what is on disk, so two
// processes on one root (a restart where the old one still beats, two
// plugins in one process) keep each other's sessions.
const (
	sessionsFileName = "nodevol-sessions.json" // in the kubelet root, beside the kubelet's own files
	// maxSessionsSize bounds what is read of a log in the format before
	// slots (plain JSON, replaced at each heartbeat), which a process
	// converts: more means it was not written by nodevol, and then no
	// mount is adopted.
	maxSessionsSize = 1 << 20
	// maxSessions bounds how many sessions one boot keeps apart: past it
	// the oldest are merged into one (what lay between them becomes
	// nodevol's time, never adoptable). A slot holds this many of the
	// longest sessions (two 20-digit IDs each) and the boot ID.
	maxSessions = 1000
	// slotSize is the size of each of the log's two slots.
	slotSize = 64 << 10
	// unrecordedSize is the size of a log being written whole (made, or
	// converted from the format before slots) until it is: a truncate to
	// it needs no block (the file is sparse), so a process that cannot
	// finish (a full filesystem) or dies in the middle leaves the log
	// so. Who reads it cannot know when nodevol ran before it, and takes
	// everything before its own sample as nodevol's time: a tmpfs
	// planted while the unrecorded process ran is never adopted.
	unrecordedSize = 3 * slotSize
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
	log  logr.Logger

	// beat serialises heartbeats and end (alive, and the log's I/O); mu
	// guards what SetUp reads (err, prior, mine, placed).
	beat  sync.Mutex
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
	// alive holds, for as long as this process's session lasts, an open
	// file description lock on a byte of the log named by mine.From (see
	// running): another process that starts meanwhile takes the session
	// as lasting until its own start, not as ending at its last
	// heartbeat.
	alive *os.File

	done chan struct{} // closed when run returns
}

// startSessions opens this process's session in the log under root: it
// samples the mount ID counter, reads the log (a log of another boot is
// dropped), appends the new session and writes the log. A failure is
// kept: the returned sessions then adopts nothing and says why.
func startSessions(root string, log logr.Logger) *sessions {
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
	boot, err := bootID()
	if err != nil {
		return err
	}
	lg, err := lockSessionLog(s.root, boot)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		// The log could not be made: the session starts now all the
		// same, and heartbeats make the log once they can (sampled
		// without the lock: an earlier sample is as good a start).
		if id, serr := sampleMountID(s.root); serr == nil {
			s.boot, s.mine = boot, session{From: id, To: id}
		}
	}
	if err != nil {
		return err
	}
	defer lg.Close()
	for i, p := range lg.log.Sessions {
		if p.From > p.To || p.To > lg.now {
			return fmt.Errorf("%s: session %d-%d is not before the mount ID counter's %d: not written by nodevol on this boot", lg.Name(), p.From, p.To, lg.now)
		}
		// A process still running (a restart where the old one still
		// beats, another plugin of this process) has run since its last
		// heartbeat: until now, as far as this process can know (and
		// when the kernel cannot say).
		if alive, err := running(lg.File, p.From); alive || err != nil {
			lg.log.Sessions[i].To = lg.now
		}
	}
	// The session is this process's from here on, whatever fails below:
	// heartbeats extend it (and write it, if this write fails) as long
	// as the process runs, adoption or not.
	prior := slices.SortedFunc(slices.Values(lg.log.Sessions), compareSessions)
	s.boot, s.prior, s.mine = boot, capSessions(prior), session{From: lg.now, To: lg.now}
	if err := errors.Join(s.hold(lg.now), lg.write(mergeSessions(nil, s.prior, s.mine))); err != nil {
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
	return nil
}

// hold takes the lock that tells other processes that this process's
// session, starting at from, is running (running). It lasts until end,
// or until this process dies. It is an open file description lock on a
// byte of the log past its end (nothing is written there), of a
// descriptor of its own: independent of the flock, and held by no other
// descriptor of this process (another plugin's session is told apart).
func (s *sessions) hold(from uint64) error {
	d, err := fsat.OpenRoot(s.root)
	if err != nil {
		return err
	}
	f, err := d.OpenOwnFile(sessionsFileName)
	d.Close()
	if err != nil {
		return err
	}
	lk := sessionHold(from)
	if err := fsat.Retry(func() error { return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) }); err != nil {
		f.Close()
		return &os.PathError{Op: "fcntl F_OFD_SETLK", Path: f.Name(), Err: err}
	}
	s.alive = f
	return nil
}

// end releases this process's hold on its session (hold): from then on,
// a process that starts takes it as ending at its last heartbeat.
func (s *sessions) end() {
	if s.alive != nil {
		s.alive.Close()
		s.alive = nil
	}
}

// sessionHold is the lock held for the session that starts at from
// (hold): one byte past the log's two slots.
func sessionHold(from uint64) unix.Flock_t {
	return unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 2*slotSize + int64(min(from, 1<<62)), Len: 1}
}

// running reports whether the process whose session starts at from
// still holds it (hold).
func running(f *os.File, from uint64) (bool, error) {
	lk := sessionHold(from)
	if err := fsat.Retry(func() error { return unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk) }); err != nil {
		return false, &os.PathError{Op: "fcntl F_OFD_GETLK", Path: f.Name(), Err: err}
	}
	return lk.Type != unix.F_UNLCK, nil
}

// heartbeat extends this process's session to now. It holds beat, not
// mu, while it waits for the log's lock and writes: SetUp's questions
// (beforeNodevol, placedBefore) never wait for another process's hold of
// the lock or for a slow disk.
func (s *sessions) heartbeat() error {
	s.beat.Lock()
	defer s.beat.Unlock()
	s.mu.Lock()
	mine := s.mine
	s.mu.Unlock()
	if mine.From == 0 { // no session: start failed before its sample, or killed (tests)
		return nil
	}
	lg, err := lockSessionLog(s.root, s.boot)
	if err != nil {
		return err
	}
	defer lg.Close()
	mine.To = lg.now
	s.mu.Lock()
	s.mine = mine
	s.mu.Unlock()
	if err := lg.write(mergeSessions(lg.log.Sessions, s.prior, mine)); err != nil {
		return err
	}
	// Held in the log now in place, should it have been replaced since.
	if s.alive != nil {
		a, aerr := s.alive.Stat()
		l, lerr := lg.Stat()
		if aerr == nil && lerr == nil && os.SameFile(a, l) {
			return nil
		}
		s.end()
	}
	return s.hold(mine.From)
}

// run beats until stop is closed, then ends the session with a last
// beat.
func (s *sessions) run(stop <-chan struct{}) {
	defer close(s.done)
	defer func() {
		s.beat.Lock()
		defer s.beat.Unlock()
		s.end()
	}()
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

// sessionSlotMagic opens each slot of the log.
var sessionSlotMagic = [8]byte{'n', 'v', 's', 'e', 's', 's', '2', '\n'}

// sessionSlotHeader is a slot's header: the magic, the sequence number
// (uint64), the length of the JSON that follows (uint32) and the SHA-256
// of all three and the JSON.
const sessionSlotHeader = 8 + 8 + 4 + digest.Size

// lockedLog is the session log, open and locked, as read under the lock.
type lockedLog struct {
	*os.File
	now uint64     // the mount ID counter, sampled under the lock
	log sessionLog // what the file holds (empty if of another boot)
	seq uint64     // the sequence number of the slot it was read from
}

// lockSessionLog opens the session log of root, creating it, locks it
// (flock, exclusive: Close unlocks it), samples the mount ID counter and
// reads the log. Everything a process writes to the log it writes under
// the lock, and its samples are taken under it: so no session on disk
// ends past a sample taken under the lock (start relies on it).
func lockSessionLog(root, boot string) (*lockedLog, error) {
	d, err := fsat.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	// The file locked must be the one in the log's place: one deleted or
	// replaced (by an operator) while this waited for its lock is
	// another process's no more, and what is written there is lost.
	var f *os.File
	for try := 0; ; try++ {
		if f, err = d.OpenOwnFile(sessionsFileName); err != nil {
			return nil, err
		}
		if err := fsat.Retry(func() error { return unix.Flock(int(f.Fd()), unix.LOCK_EX) }); err != nil {
			f.Close()
			return nil, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		var locked unix.Stat_t
		err := unix.Fstat(int(f.Fd()), &locked)
		if err == nil {
			var there unix.Stat_t
			if there, err = d.Lstat(sessionsFileName); err == nil && there.Dev == locked.Dev && there.Ino == locked.Ino {
				break
			}
		}
		f.Close()
		if err == nil {
			err = errors.New("replaced while this process waited for its lock")
		}
		if errors.Is(err, unix.ENOENT) {
			err = errors.New("deleted while this process waited for its lock")
		}
		if try == 9 {
			return nil, &os.PathError{Op: "lock", Path: d.Join(sessionsFileName), Err: err}
		}
	}
	lg := &lockedLog{File: f}
	if lg.now, err = sampleMountID(root); err == nil {
		lg.log, lg.seq, err = readSessionLog(f)
	}
	if errors.Is(err, errUnrecordedSession) {
		// Some process ran without its session: until now, as far as
		// this one can know.
		lg.log, err = sessionLog{BootID: boot, Sessions: []session{{From: 0, To: lg.now}}}, nil
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if lg.log.BootID != boot {
		lg.log = sessionLog{BootID: boot} // the mounts of another boot are gone
	}
	return lg, nil
}

// write writes sessions as the log's next slot.
func (lg *lockedLog) write(sessions []session) error {
	return writeSessionLog(lg.File, lg.seq+1, lg.log.BootID, sessions)
}

// readSessionLog reads the locked log f: the newest slot whose checksum
// holds, and its sequence number. An empty file is an empty log; a log in
// the format before slots (plain JSON) is read as it is, sequence 0.
func readSessionLog(f *os.File) (sessionLog, uint64, error) {
	var l sessionLog
	st, err := f.Stat()
	if err != nil {
		return l, 0, err
	}
	switch size := st.Size(); {
	case size == 0:
		return l, 0, nil
	case size == unrecordedSize:
		return l, 0, errUnrecordedSession
	case size > maxSessionsSize:
		return l, 0, fmt.Errorf("%s: %d bytes, more than nodevol writes", f.Name(), size)
	case size != 2*slotSize:
		b := make([]byte, size)
		if _, err := f.ReadAt(b, 0); err != nil {
			return l, 0, err
		}
		if err := json.Unmarshal(b, &l); err != nil {
			return l, 0, fmt.Errorf("parse %s: %w", f.Name(), err)
		}
		return l, 0, nil
	}
	b := make([]byte, 2*slotSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return l, 0, err
	}
	var best []byte
	var seq uint64
	for i := range 2 {
		if data, n, ok := decodeSessionSlot(b[i*slotSize : (i+1)*slotSize]); ok && (best == nil || n > seq) {
			best, seq = data, n
		}
	}
	if best == nil {
		return l, 0, fmt.Errorf("parse %s: neither slot is intact", f.Name())
	}
	if err := json.Unmarshal(best, &l); err != nil {
		return l, 0, fmt.Errorf("parse %s: %w", f.Name(), err)
	}
	return l, seq, nil
}

// errUnrecordedSession says that the log is one a process could not
// write its session into (unrecordedSize).
var errUnrecordedSession = errors.New("a nodevol process could not write its session")

// decodeSessionSlot returns the JSON a slot holds and its sequence number,
// if its magic and checksum hold.
func decodeSessionSlot(b []byte) ([]byte, uint64, bool) {
	if [8]byte(b[:8]) != sessionSlotMagic {
		return nil, 0, false
	}
	n := binary.LittleEndian.Uint32(b[16:20])
	if int64(n) > slotSize-sessionSlotHeader {
		return nil, 0, false
	}
	data := b[sessionSlotHeader : sessionSlotHeader+int(n)]
	if sum := digest.SHA256(append(b[:20:20], data...)); !bytes.Equal(sum[:], b[20:sessionSlotHeader]) {
		return nil, 0, false
	}
	return data, binary.LittleEndian.Uint64(b[8:16]), true
}

// writeSessionLog writes sessions into the locked log f as slot seq%2
// (the one not holding sequence seq-1), durably. A file not yet in slots
// (new, or in the format before them) is written whole, both slots' space
// included, which later heartbeats overwrite without needing a block; it
// is marked unrecorded (unrecordedSize) until it is.
func writeSessionLog(f *os.File, seq uint64, boot string, sessions []session) error {
	data, err := json.Marshal(sessionLog{BootID: boot, Sessions: sessions})
	if err != nil {
		return err
	}
	if len(data) > slotSize-sessionSlotHeader {
		return fmt.Errorf("%s: %d sessions do not fit in a slot", f.Name(), len(sessions))
	}
	slot := make([]byte, sessionSlotHeader+len(data))
	copy(slot, sessionSlotMagic[:])
	binary.LittleEndian.PutUint64(slot[8:16], seq)
	binary.LittleEndian.PutUint32(slot[16:20], uint32(len(data)))
	copy(slot[sessionSlotHeader:], data)
	sum := digest.SHA256(append(slot[:20:20], data...))
	copy(slot[20:sessionSlotHeader], sum[:])
	st, err := f.Stat()
	if err != nil {
		return err
	}
	off := int64(seq%2) * slotSize
	if st.Size() == 2*slotSize {
		if _, err := f.WriteAt(slot, off); err != nil {
			return err
		}
		return f.Sync()
	}
	// Marked unrecorded first (no block needed): should the write fail
	// (a full filesystem) or the process die in the middle of it, the
	// log, in part overwritten, says that a session went unrecorded
	// rather than what it held or that no nodevol process ran. Its size
	// says slots only once they are written and durable.
	if err := f.Truncate(unrecordedSize); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	whole := make([]byte, 2*slotSize)
	copy(whole[off:], slot)
	if _, err := f.WriteAt(whole, 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Truncate(2 * slotSize); err != nil {
		return err
	}
	return f.Sync()
}

// mergeSessions is the log to write: the sessions on disk (other
// processes' included), this process's copy of the earlier ones (should
// the file have lost them) and its own, one entry per process (a process's
// session is known by where it started; the longest copy wins), oldest
// first, bounded.
func mergeSessions(disk, prior []session, mine session) []session {
	byFrom := map[uint64]uint64{}
	for _, p := range append(disk[:len(disk):len(disk)], prior...) {
		byFrom[p.From] = max(byFrom[p.From], p.To)
	}
	byFrom[mine.From] = max(byFrom[mine.From], mine.To)
	l := make([]session, 0, len(byFrom))
	for from, to := range byFrom {
		l = append(l, session{From: from, To: to})
	}
	slices.SortFunc(l, compareSessions)
	return capSessions(l)
}

// compareSessions orders sessions by where they started.
func compareSessions(a, b session) int { return cmp.Compare(a.From, b.From) }

// capSessions merges the oldest of a log of maxSessions or more sessions
// into one, which then covers everything between them.
func capSessions(l []session) []session {
	if len(l) < maxSessions {
		return l
	}
	keep := l[len(l)-maxSessions/2+1:]
	merged := session{From: l[0].From}
	for _, p := range l[:len(l)-maxSessions/2+1] {
		merged.To = max(merged.To, p.To)
	}
	return append([]session{merged}, keep...)
}
