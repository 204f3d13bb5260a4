package emptydir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/volume"
)

const (
	readyFileName = "ready"        // the kubelet's marker: SetUp completed
	metaFileName  = "nodevol.json" // what SetUp created, for TearDown and reconstruction
	metaDirMode   = 0o750
	// maxMetadataSize bounds how much of nodevol.json is ever read: the
	// file sits in the pod directory, where whoever can write there could
	// replace it with something huge (or a symlink to /dev/zero).
	maxMetadataSize = 64 << 10
	// maxMetadataEntries bounds how many entries of the metadata
	// directory are read: it holds two files and, after interrupted
	// writes, a few temporary ones; more is someone else's doing.
	maxMetadataEntries = 1024
)

// metadata is what SetUp records beside the ready marker in
// <root>/pods/<uid>/plugins/kubernetes.io~empty-dir/<volume>/nodevol.json.
// TearDown still verifies the disk: the record says what SetUp made, the
// disk says what is there now, and a mount is unmounted only when the two
// agree.
type metadata struct {
	Medium volume.Medium `json:"medium"`
	// SizeLimit is the spec's sizeLimit; after a resize (Plugin.ResizeVolume),
	// the size the volume was resized to.
	SizeLimit int64 `json:"sizeLimit,omitempty"`
	// SizeBytes is the tmpfs size= SetUp chose, or the one the last
	// resize set.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Mode is the spec's Mode (nil: the default mode), for
	// reconstruction.
	Mode *uint32 `json:"mode,omitempty"`
	// StickyBit is the spec's StickyBit, for reconstruction.
	StickyBit      bool   `json:"stickyBit,omitempty"`
	HugePageSize   int64  `json:"hugePageSize,omitempty"`
	QuotaProjectID uint32 `json:"quotaProjectID,omitempty"`
	// QuotaDirDev, QuotaDirIno and QuotaDirGen identify the directory the
	// project was assigned to (fsquota.Project's identity): TearDown takes
	// the project off the volume directory only when it is that very
	// directory. Device and inode are recorded with QuotaPending already,
	// from the descriptor Assign is then handed; the generation with the
	// project.
	QuotaDirDev uint64 `json:"quotaDirDev,omitempty"`
	QuotaDirIno uint64 `json:"quotaDirIno,omitempty"`
	QuotaDirGen uint32 `json:"quotaDirGen,omitempty"` // inode generation, 0 when unknown
	// QuotaPending says SetUp is asking the quota manager for a project
	// for the volume directory and has not recorded the answer. It is
	// written before Assign, so that a crash after Assign recorded the
	// project in the bookkeeping files, or tagged the directory, cannot
	// leave a project that no record names: TearDown clears the
	// directory's quota whenever it is set (the bookkeeping files name
	// the ID; QuotaDirDev and QuotaDirIno the directory).
	QuotaPending bool `json:"quotaPending,omitempty"`
	// Mount is the identity of the tmpfs or hugetlbfs SetUp mounted on the
	// volume directory (nil for the Default medium). It is recorded before
	// the mount is attached, so a crash cannot leave a mount of SetUp's
	// without its record.
	Mount *mountRecord `json:"mount,omitempty"`
	// Location is where a located volume (Plugin.NewMounterAt) is; nil
	// for an ordinary volume. A record is only ever used for the volume
	// it names (see ErrOtherVolumesRecord).
	Location *locationRecord `json:"location,omitempty"`
}

// locationRecord is a located volume's place (see Location), as its
// nodevol.json records it.
type locationRecord struct {
	PodUID string `json:"podUID"`
	Plugin string `json:"plugin"`
	Dir    string `json:"dir"`
	Sub    string `json:"sub,omitempty"`
	Meta   string `json:"meta"`
}

func (l *locationRecord) describe() string {
	dir := l.Dir
	if l.Sub != "" {
		dir += "/" + l.Sub
	}
	return fmt.Sprintf("pod %s, plugin %s, directory %q, metadata %q", l.PodUID, l.Plugin, dir, l.Meta)
}

// mountRecord identifies one mount. TearDown unmounts the volume's
// directory only when the single mount on it matches the record: by
// UniqueID where the kernel has unique mount IDs (Linux 6.8, never reused),
// else by ID, Dev, FSType and Source together (classic mount IDs and
// anonymous device numbers can be reused after an unmount).
type mountRecord struct {
	UniqueID uint64 `json:"uniqueID,omitempty"` // statx STATX_MNT_ID_UNIQUE
	ID       uint64 `json:"id"`                 // statx STATX_MNT_ID, as in /proc/self/mountinfo
	Dev      uint64 `json:"dev"`                // st_dev of the mount's root (its superblock)
	FSType   string `json:"fsType"`
	Source   string `json:"source"`
	// DirDev and DirIno identify the directory the mount was attached on:
	// after the unmount, that directory must be what the volume's name
	// shows again, or nothing is removed.
	DirDev uint64 `json:"dirDev,omitempty"`
	DirIno uint64 `json:"dirIno,omitempty"`
	// Pending says the mount was being made by the embedder's mounter
	// (volume.SystemMounter), which mounts by path: its IDs are not
	// known, only its random Source, written before the mount is made.
	// A mount on the directory then proves to be this one by that source
	// alone (a single tmpfs or hugetlbfs carrying it); SetUp records its
	// IDs when it finds it, TearDown holds it to the IDs it sees while
	// checking it.
	Pending bool `json:"pending,omitempty"`
	// Adopted says the mount was not made by nodevol but by the kubelet
	// that ran on the node before it, and adopted by SetUp under the
	// adoption rule (WithAdoption): its Source is the kubelet's ("tmpfs",
	// or "nodev" for hugetlbfs), which proves nothing, so it is proven
	// by its unique mount ID alone, in the boot BootID names, as the
	// sole mount of its superblock and the whole filesystem.
	Adopted bool   `json:"adopted,omitempty"`
	BootID  string `json:"bootID,omitempty"`
}

// hasQuota reports whether m records a quota project TearDown must clear:
// an assigned one, or one SetUp was assigning when it stopped.
func (m *metadata) hasQuota() bool {
	return m != nil && (m.QuotaProjectID != 0 || m.QuotaPending)
}

// quotaProject is the recorded project as fsquota.Clear takes it.
func (m *metadata) quotaProject() fsquota.Project {
	return fsquota.Project{ID: m.QuotaProjectID, Dev: m.QuotaDirDev, Ino: m.QuotaDirIno, Gen: m.QuotaDirGen}
}

// describeQuota names the recorded quota project for messages.
func (m *metadata) describeQuota() string {
	if m.QuotaProjectID != 0 {
		return fmt.Sprintf("quota project %d", m.QuotaProjectID)
	}
	return "a quota project SetUp was assigning when it stopped"
}

// parseMetadata decodes nodevol.json; path is for the error message.
func parseMetadata(b []byte, path string) (*metadata, error) {
	m, err := decodeMetadata(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return m, nil
}

// errNoMountID is decodeMetadata's error for a mount record of a Memory or
// HugePages volume that has no mount ID and is not pending.
var errNoMountID = errors.New("a mount record without a mount ID")

// recordMemo is the last record a Planner decoded and the bytes it was
// decoded from. A node's Default-medium volumes have byte-identical
// records: one read again is copied from here, not decoded again (about
// 1.5 µs and ten allocations a record). Only a record without pointers is
// kept, so a copy shares nothing with the memo
// (TestRecordMemoKeepsNoPointer).
type recordMemo struct {
	raw  []byte
	meta metadata
}

// decode is decodeMetadata of b, a copy of the memo's record when b is
// the bytes it was decoded from (m nil: decodeMetadata). b is kept: the
// caller must not change it.
func (m *recordMemo) decode(b []byte) (*metadata, error) {
	if m == nil {
		return decodeMetadata(b)
	}
	if m.raw != nil && bytes.Equal(b, m.raw) {
		c := m.meta
		return &c, nil
	}
	d, err := decodeMetadata(b)
	if err == nil && d.Mode == nil && d.Mount == nil && d.Location == nil {
		m.raw, m.meta = b, *d
	}
	return d, err
}

// decodeMetadata is parseMetadata with an error that names no path (a
// caller that reads many records makes one only for a message).
func decodeMetadata(b []byte) (*metadata, error) {
	var m metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m.Medium != volume.MediumDefault && m.Mount != nil && m.Mount.ID == 0 && m.Mount.UniqueID == 0 && !m.Mount.Pending {
		return nil, errNoMountID
	}
	return &m, nil
}
