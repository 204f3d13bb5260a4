package emptydir

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/digest"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// podVolume is one emptyDir volume of one pod, reached by descriptors from
// the kubelet root: the root is opened once (it may be a symlink), then
// every component below it with O_NOFOLLOW, and the directories from the
// pod directory down must be on the pod directory's mount. Nothing below
// the root is ever resolved by name again; a symlink where a directory
// belongs is an error naming it.
//
// An ordinary volume's directory is in volumes/kubernetes.io~empty-dir and
// its metadata in plugins/kubernetes.io~empty-dir under the same name; a
// located one's (Location) in another plugin's volumes directory, its
// metadata under another name. Both are reached the same way.
type podVolume struct {
	ref      volRef // what the volume's mount source and record are made for
	name     string // its directory's name in vols
	metaName string // its metadata directory's name in metaParent
	dir      string // display path (the metadata directory's is meta's)

	root       *fsat.Dir
	pods       *fsat.Dir // <root>/pods; nil when missing
	pod        *fsat.Dir // <root>/pods/<uid>; nil when missing
	vols       *fsat.Dir // <pod>/volumes/<escaped plugin> (located with Sub: .../<dir>); nil when missing
	metaParent *fsat.Dir // <pod>/plugins/kubernetes.io~empty-dir; nil when missing
	meta       *fsat.Dir // <metaParent>/<meta name>; nil when missing

	hook testhook.Hook // the plugin's crash points (tests only)

	// topShared says root and pods belong to a Planner (Close leaves them
	// open); volsFromPods is vols's path from pods ("<uid>/volumes/...").
	// A listing's pod and vols (Planner.PlanListed) are Dirs of borrowed
	// descriptors (fsat.Dir.Borrow), which Close leaves open.
	topShared    bool
	volsFromPods string

	// looker, set by a Planner, is vols as a mountdetect.Parent: plan then
	// looks at the volume directory by a statx of its name and answers
	// from the mount table without opening it (lookEntry).
	looker *mountdetect.Parent

	// budget, set by a Planner for one plan, is the pod's budget of a
	// scan, which checkMetadataDir charges (nil: none).
	budget *volume.EntryBudget
	// records is the Planner's memo of the last record decoded (nil:
	// none), for readMeta.
	records *recordMemo
}

// openVolume opens what exists of the volume's directories; with create
// it makes the missing ones (mode 0750, as the kubelet does).
func (p *Plugin) openVolume(r volRef, create bool) (_ *podVolume, err error) {
	return p.openVolumeIn(r, create, nil, nil)
}

// openVolumeIn is openVolume; with root not nil, the kubelet root and its
// pods directory (nil when missing) are root and pods, opened already
// and owned by the caller (a Planner's, kept across pods): v.Close leaves
// them open.
func (p *Plugin) openVolumeIn(r volRef, create bool, root, pods *fsat.Dir) (_ *podVolume, err error) {
	dir, err := p.refPath(r)
	if err != nil {
		return nil, err
	}
	escaped := escapedPluginName
	volsEscaped := escaped
	if r.plugin != PluginName {
		if volsEscaped, err = volume.EscapePluginName(r.plugin); err != nil {
			return nil, err
		}
	}
	v := &podVolume{ref: r, name: r.dir, metaName: r.meta, dir: dir, hook: p.hook}
	volsRel := "volumes/" + volsEscaped
	if r.sub != "" {
		// The volume is a directory in <plugin>/<dir> (a CSI target path,
		// <volume>/mount): vols is <dir>, reached the same way.
		volsRel += "/" + r.dir
		v.name = r.sub
	}
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	v.volsFromPods = r.podUID + "/" + volsRel
	if root != nil {
		v.root, v.pods, v.topShared = root, pods, true
		return v.openBelowPods(r, create, escaped, volsRel)
	}
	rootPath := p.host.Layout().Root()
	v.root, err = fsat.OpenRoot(rootPath)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return v, nil
		}
		// The root is trusted (and may be a symlink): create it by name,
		// as the kubelet does.
		if err := os.MkdirAll(rootPath, metaDirMode); err != nil {
			return nil, err
		}
		v.root, err = fsat.OpenRoot(rootPath)
	}
	if err != nil {
		return nil, err
	}
	// The pods directory may be a mount of its own; a pod directory must
	// be on it (nothing mounted on a pod directory is ever entered).
	if v.pods, err = openOrCreate(v.root, "pods", create); err != nil {
		return nil, err
	}
	return v.openBelowPods(r, create, escaped, volsRel)
}

// openOrCreate opens the directory rel below from (nil when from is nil,
// or rel is missing and not created); with create it makes the missing
// components (mode 0750).
func openOrCreate(from *fsat.Dir, rel string, create bool, opts ...fsat.Option) (*fsat.Dir, error) {
	if from == nil {
		return nil, nil
	}
	if create {
		return from.MkdirAll(rel, metaDirMode, opts...)
	}
	d, err := from.OpenDir(rel, opts...)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return d, err
}

// openBelowPods opens (with create, makes) the volume's directories below
// v.pods: the pod directory, the volumes directory, the emptyDir metadata
// directories. On error v is closed.
func (v *podVolume) openBelowPods(r volRef, create bool, escaped, volsRel string) (_ *podVolume, err error) {
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	open := func(from *fsat.Dir, rel string, opts ...fsat.Option) (*fsat.Dir, error) {
		return openOrCreate(from, rel, create, opts...)
	}
	if v.pod, err = open(v.pods, r.podUID, fsat.SameMount); err != nil {
		return nil, err
	}
	if v.vols, err = open(v.pod, volsRel, fsat.SameMount); err != nil {
		return nil, err
	}
	if v.metaParent, err = open(v.pod, "plugins/"+escaped, fsat.SameMount); err != nil {
		return nil, err
	}
	if v.meta, err = open(v.metaParent, r.meta, fsat.SameMount); err != nil {
		return nil, err
	}
	return v, nil
}

// sibling is the ordinary volume r (dir its path) of v's pod, reached
// through the directories v holds (which it shares: close only its meta):
// only its metadata directory is opened, as openVolume opens it.
func (v *podVolume) sibling(r volRef, dir string) (*podVolume, error) {
	s := *v
	s.ref, s.name, s.metaName, s.dir, s.meta = r, r.dir, r.meta, dir, nil
	meta, err := openOrCreate(s.metaParent, r.meta, false, fsat.SameMount)
	if err != nil {
		return nil, err
	}
	s.meta = meta
	return &s, nil
}

func (v *podVolume) Close() {
	v.meta.Close()
	v.metaParent.Close()
	v.vols.Close()
	v.pod.Close()
	if !v.topShared {
		v.pods.Close()
		v.root.Close()
	}
}

// readMeta returns the recorded metadata, nil when there is none. It is
// read as a regular file of bounded size that is not a symlink, never
// opened unless it is one: a FIFO, a device or a link to one is an error,
// never a hang, an open or an unbounded allocation.
func (v *podVolume) readMeta() (*metadata, error) {
	if v.meta == nil {
		return nil, nil
	}
	b, err := v.meta.ReadFile(metaFileName, maxMetadataSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The record's path is made for a message only.
	path := func() string { return v.meta.Join(metaFileName) }
	m, err := v.records.decode(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path(), err)
	}
	// Another volume's record (a name reused, a record copied) is never
	// this volume's: an error, so that nothing is removed or overwritten.
	if err := v.ref.owns(m, path); err != nil {
		return nil, err
	}
	return m, nil
}

// writeMeta records m durably (atomic replace, file and directory synced).
func (v *podVolume) writeMeta(m *metadata) error {
	m.Location = v.ref.record()
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return v.meta.WriteFileAtomic(metaFileName, append(b, '\n'), 0o600)
}

func (v *podVolume) isReady() bool {
	if v.meta == nil {
		return false
	}
	st, err := v.meta.Lstat(readyFileName)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

func (v *podVolume) setReady() error { return v.meta.CreateEmpty(readyFileName, 0o600) }

// checkMetadataDir returns an error unless the metadata directory holds
// only what nodevol and the kubelet write there — the ready marker, the
// metadata file and temporary files of an interrupted write, all regular
// files — so that removing it at the end of a teardown cannot fail after
// the volume is gone. Anything else is left to the operator, named.
//
// maybeRecord is false when the listing went through the whole directory
// and showed neither the record nor a temporary file of one (a record
// being replaced by rename while it is listed); readMeta would find none
// then, and is not asked.
func (v *podVolume) checkMetadataDir() (maybeRecord bool, err error) {
	if v.meta == nil {
		return false, nil
	}
	var bad []string
	var spent error
	n := 0
	err = v.meta.EachEntry(func(e fsat.Entry) error {
		if n++; n > maxMetadataEntries {
			return fsat.ErrStop
		}
		if e.Name != readyFileName && e.Name != metaFileName {
			if spent = v.budget.Take(n - 1); spent != nil {
				return fsat.ErrStop
			}
		}
		own := e.Name == readyFileName
		if e.Name == metaFileName || fsat.IsTempOf(e.Name, metaFileName) {
			own, maybeRecord = true, true
		}
		if !own || e.Type != 0 {
			bad = append(bad, v.meta.Join(e.Name))
			if len(bad) == 10 {
				return fsat.ErrStop
			}
		}
		return nil
	})
	if err != nil {
		return true, err
	}
	if spent != nil {
		return true, &os.PathError{Op: "readdir", Path: v.meta.Path(), Err: fmt.Errorf("%w; the scan stopped here", spent)}
	}
	if n > maxMetadataEntries {
		// Only a flood of temporary names gets here: nodevol leaves one
		// per interrupted write. Reading on would take as long as whoever
		// made them wished.
		return true, fmt.Errorf("%w: the metadata directory %s holds more than %d entries; it is never removed: move it away, then tear down again",
			ErrUnexpectedMetadata, v.meta.Path(), maxMetadataEntries)
	}
	if len(bad) > 0 {
		return true, fmt.Errorf("%w: the metadata directory %s holds what neither nodevol nor the kubelet writes there (%s); it is never removed: move it away, then tear down again",
			ErrUnexpectedMetadata, v.meta.Path(), strings.Join(bad, ", "))
	}
	return maybeRecord, nil
}

// removeMetadata removes the ready marker, the metadata file, temporary
// files of an interrupted metadata write and the now-empty metadata
// directory, and nothing else: anything unexpected in the directory makes
// the final rmdir fail with an error (the plan checks for it first).
func (v *podVolume) removeMetadata() error {
	if v.meta == nil {
		return nil
	}
	// Temporary files are removed as they are listed: however many there
	// are, nothing is collected.
	if err := v.meta.EachEntry(func(e fsat.Entry) error {
		if fsat.IsTempOf(e.Name, metaFileName) && e.Type == 0 {
			return v.meta.Remove(e.Name)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, name := range []string{readyFileName, metaFileName} {
		if err := v.meta.Remove(name); err != nil {
			return err
		}
	}
	return v.metaParent.Rmdir(v.metaName)
}

// entryKind is what the volume's name in vols is.
type entryKind int

const (
	entryMissing entryKind = iota
	entryDir
	entrySymlink
	entryOther // a regular file, device, FIFO, socket
)

// bothIDs is what the volume's identity checks ask fsat.StatMount: the
// unique mount ID to compare mounts by where the kernel has one, and the
// classic one to find the mount in the mount table (and record it).
const bothIDs = fsat.MountKey | fsat.TableID

// provenBy reports whether the mount identified by mi, listed in the mount
// table with fsType and source, is the one rec recorded for the volume r —
// in a way a forged record cannot fake: the record lives in the pod
// directory, which an attacker may write, so the proof is the mount's own
// source, a name SetUp gave the filesystem it created for this very volume
// (newSource: random, and naming the pod and the volume). A record naming
// any other source (a share's "server:/export", the kubelet's "tmpfs")
// proves nothing; a record naming a nodevol source can only match a tmpfs
// or hugetlbfs created with that name for this volume, which holds nobody's
// data but its creator's — not another volume's mount renamed (from another
// mount namespace) or bind-mounted into this one's place with a copy of
// that volume's record: its source names the other volume. The mount ID
// must match too: the unique one where the kernel has unique IDs (a record
// without one is not accepted then), else the classic ID and the device —
// except in a pending record (written before an embedder's mounter made the
// mount, which a crash interrupted before its IDs were recorded), where the
// source is all there is.
//
// An adopted mount (mountRecord.Adopted) has the kubelet's source, which
// proves nothing: it is proven by its unique mount ID alone
// (adoptedProvenBy).
func (rec *mountRecord) provenBy(mi fsat.MountStat, fsType, source string, r volRef) bool {
	if rec.Adopted {
		return rec.adoptedProvenBy(mi, fsType, source)
	}
	if fsType != "tmpfs" && fsType != "hugetlbfs" {
		return false // SetUp makes nothing else; a FUSE or overlay mount may name any source
	}
	if !isSourceFor(rec.Source, r) || rec.Source != source || rec.FSType != fsType {
		return false
	}
	return rec.Pending || rec.sameMount(mi, r)
}

// pin returns the pending record rec completed with the IDs of the mount
// mi, which has proven to be its mount.
func (rec *mountRecord) pin(mi fsat.MountStat) mountRecord {
	r := *rec
	r.UniqueID, r.ID, r.Dev, r.Pending = mi.UniqueID, mi.ID, mi.Dev, false
	return r
}

// newSource returns a new mount source for a filesystem SetUp creates for
// the volume r: "nv-", 8 random hex digits, "-" and 8 hex digits of a
// digest of the random part, the pod UID and the volume name (sourceFor):
// 20 characters, as short as busybox's df needs to print a filesystem on
// one line (a longer name goes on a line of its own, and
// `df | grep PATH | awk '{print $2}'`, which Kubernetes's own e2e test of
// a Memory volume's size runs, reads the used blocks instead of the size).
//
// A located volume's source (see Location) is made the same way, with a
// digest of another domain over the pod UID, the plugin, the directory and
// the metadata name (locatedSourceFor): no source of an ordinary volume or
// of another location is ever one of its sources, and the reverse.
//
// Records written before sources were short name the long form,
// "nodevol-emptydir-", 16 random hex digits, "-" and 16 hex digits of the
// same digest: they still prove their mounts (isSourceFor takes both).
func newSource(r volRef) string {
	var b [4]byte
	fsat.Random(b[:])
	return refSourceFor(hex.EncodeToString(b[:]), r)
}

// refSourceFor is the source with the random part nonce for the volume r.
func refSourceFor(nonce string, r volRef) string {
	if !r.located {
		return sourceFor(nonce, r.podUID, r.dir)
	}
	dir := r.dir
	if r.sub != "" {
		// "/" is in no name: dir/sub is no other location's dir.
		dir += "/" + r.sub
	}
	return locatedSourceFor(nonce, r.podUID, r.plugin, dir, r.meta)
}

// locatedSourceFor is the source with the random part nonce for the
// located volume at plugin/dir with metadata meta of pod podUID. Its
// digest's domain differs from sourceFor's before the first NUL, and no
// part contains a NUL (all are validated names, the nonce is hex), so no
// input of one is an input of the other.
func locatedSourceFor(nonce, podUID, plugin, dir, meta string) string {
	h := digest.SHA256([]byte("nodevol-emptydir-located\x00" + nonce + "\x00" + podUID + "\x00" + plugin + "\x00" + dir + "\x00" + meta))
	return sourceOf(nonce, h)
}

// The two forms of a source: the short one newSource makes, and the long
// one of records written before.
const (
	sourcePrefix       = "nv-"
	sourceNonceLen     = 8 // hex digits, and as many of the digest
	longSourcePrefix   = "nodevol-emptydir-"
	longSourceNonceLen = 16
)

// sourceOf is the source with the random part nonce and the digest h: the
// short form for a short nonce, the long form for a long one.
func sourceOf(nonce string, h [digest.Size]byte) string {
	if len(nonce) == longSourceNonceLen {
		return longSourcePrefix + nonce + "-" + hex.EncodeToString(h[:longSourceNonceLen/2])
	}
	return sourcePrefix + nonce + "-" + hex.EncodeToString(h[:sourceNonceLen/2])
}

// sourceFor is the source with the random part nonce (8 hex digits, or 16
// for the long form) for the volume vol of pod podUID.
func sourceFor(nonce, podUID, vol string) string {
	h := digest.SHA256([]byte("nodevol-emptydir\x00" + nonce + "\x00" + podUID + "\x00" + vol))
	return sourceOf(nonce, h)
}

// sourceNonce is the random part of s when s has one of the forms of
// newSource's sources (for whatever volume), short or long.
func sourceNonce(s string) (string, bool) {
	for _, f := range []struct {
		prefix string
		n      int
	}{{sourcePrefix, sourceNonceLen}, {longSourcePrefix, longSourceNonceLen}} {
		rest, ok := strings.CutPrefix(s, f.prefix)
		if !ok || len(rest) != 2*f.n+1 || rest[f.n] != '-' {
			continue
		}
		_, err1 := hex.DecodeString(rest[:f.n])
		_, err2 := hex.DecodeString(rest[f.n+1:])
		if err1 == nil && err2 == nil {
			return rest[:f.n], true
		}
	}
	return "", false
}

// isNodevolSource reports whether s has the form of newSource's sources,
// short or long (for whatever volume).
func isNodevolSource(s string) bool {
	_, ok := sourceNonce(s)
	return ok
}

// isSourceFor reports whether s is a source newSource made for the volume
// r, now or in the long form of earlier records.
func isSourceFor(s string, r volRef) bool {
	nonce, ok := sourceNonce(s)
	return ok && s == refSourceFor(nonce, r)
}

// recordedMountOn reports whether the mount on the open volume directory e
// (a mount root) is the one rec recorded for the volume r: a single mount
// there, proven by the mount table's type and source and the mount ID.
func recordedMountOn(e entry, path string, rec *mountRecord, r volRef) (bool, error) {
	if rec == nil || !e.Root {
		return false, nil
	}
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		return false, err
	}
	at, _, err := tab.MountsAtFile(e.Fd, path)
	if err != nil {
		return false, err
	}
	if len(at) != 1 || !rec.provenBy(e.MountStat, at[0].FSType, at[0].Source, r) {
		return false, nil
	}
	// The binds the kubelet makes for containers' subPaths of the
	// volume do not make it another volume.
	_, why, _ := soleWholeMount(tab, rec, e.ID, subpathsPrefix(r, path, at[0].MountPoint))
	return why == "", nil
}

// describeMount names a mount identity for messages.
func describeMount(mi fsat.MountStat) string {
	if mi.UniqueID != 0 {
		return fmt.Sprintf("mount ID %d (unique %#x)", mi.ID, mi.UniqueID)
	}
	return fmt.Sprintf("mount ID %d", mi.ID)
}

// entry is the volume directory as mountdetect.LookAt saw it (its
// filesystem, and one mounted on it, asked nothing), open (Fd) when it is
// a directory: O_PATH when it is a mount root, since only what the plan
// proves to be the volume's own mount is asked anything (fstatfs)
// afterwards. The caller closes it.
type entry struct {
	kind entryKind
	mountdetect.Entry
	// known, when fromTable, is what plan asks of the open directory,
	// answered without opening it (lookEntry); Fd is then -1.
	known     fromTable
	fromTable bool
}

// fromTable is what plan asks of the volume directory — the mounts on it
// and beneath it, and (not a mount root) its filesystem — answered from
// the mount table and its volumes directory.
type fromTable struct {
	at, beneath []mountdetect.Mount
	info        mountdetect.FSInfo
}

// noEntry is the entry of a volume directory that does not exist.
var noEntry = entry{Entry: mountdetect.Entry{Fd: -1}}

// lookEntry is openEntry for a Planner's plan (v.looker set, tab read):
// the volume directory is looked at by a statx of its name and, where the
// mount table and its volumes directory answer what plan asks, not opened
// (its known answers). In a mount namespace other than the kubelet's a
// Memory volume's tmpfs is a propagated copy, and a descriptor on its
// root makes the kubelet's unmount of it fail with EBUSY while open. A
// mount missing from the table, a hugetlbfs (its page size), a mount the
// table names elsewhere, a directory on another mount than its volumes
// directory: opened, as openEntry opens it.
func (v *podVolume) lookEntry(tab *mountdetect.MountTable) (entry, error) {
	if v.vols == nil || v.looker == nil || tab == nil {
		return v.openEntry()
	}
	// A directory that is not a mount root (a Default volume's) is
	// compared with its volumes directory by the mount ID the table lists
	// (Child: that mount is held open, its ID cannot be reused), which one
	// statx gives. A mount root is looked at again, with the unique ID its
	// proof compares: nothing of the first look is kept for it.
	le, err := mountdetect.LookAt(v.vols.Fd(), v.name, v.dir, mountdetect.LookTableID)
	if err == nil && le.Mode == unix.S_IFDIR && le.Root {
		le, err = mountdetect.LookAt(v.vols.Fd(), v.name, v.dir, mountdetect.LookOnly)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return noEntry, nil
	case err != nil:
		return v.openEntry() // its error, or its fallbacks
	}
	if le.Mode != unix.S_IFDIR {
		return v.openEntry() // opens nothing either
	}
	var k fromTable
	if le.Root {
		m, inTable, err := tab.MountOf(le)
		if err != nil || !inTable || m.FSType == "hugetlbfs" || filepath.Base(m.MountPoint) != v.name {
			return v.openEntry()
		}
		var ok bool
		if k.at, k.beneath, ok, err = tab.MountsOnRoot(le); err != nil || !ok {
			return v.openEntry()
		}
	} else {
		var ok bool
		if k.info, k.at, k.beneath, ok, err = tab.Child(v.looker, le, v.name); err != nil || !ok {
			return v.openEntry()
		}
	}
	return entry{kind: entryDir, Entry: le, known: k, fromTable: true}, nil
}

func (v *podVolume) openEntry() (entry, error) {
	if v.vols == nil {
		return noEntry, nil
	}
	le, err := mountdetect.LookAt(v.vols.Fd(), v.name, v.dir, mountdetect.OpenDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return noEntry, nil
	case err != nil:
		return noEntry, err
	}
	e := entry{Entry: le}
	switch le.Mode {
	case unix.S_IFDIR:
		e.kind = entryDir
	case unix.S_IFLNK:
		e.kind = entrySymlink
	default:
		e.kind = entryOther
	}
	return e, nil
}

// infoOnDir is what Detect would say of the volume directory e, a mount
// root, from the table alone: nothing is asked of the filesystem mounted
// there before it is proven the volume's own.
func infoOnDir(tab *mountdetect.MountTable, e entry) mountdetect.FSInfo {
	m, _, _ := tab.MountOf(e.Entry)
	info := e.InfoFromTable(m)
	if info.FSType == "" {
		info.FSType = "unknown"
	}
	return info
}
