package driver

// A rolling update of the DaemonSet hands the volumes an older driver
// published to this one, which knows them only from their records. These
// tests take records written by earlier versions' own code
// (testdata/records, see its README) and volumes set up as those versions
// left them, and check that this version measures, republishes and tears
// them down, leaving nothing.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// olderRecordFormat is what an earlier version's record lacks.
type olderRecordFormat struct {
	name string // testdata/records/<name>-<medium>.json
	// noQuotaDir: no quotaDirDev and quotaDirIno (the project's directory
	// is named by path only); noQuotaGen: no quotaDirGen (identified by
	// device and inode).
	noQuotaDir, noQuotaGen bool
	// longSource: a Memory volume's tmpfs has the long source
	// "nodevol-emptydir-<16 hex>-<16 hex>".
	longSource bool
}

var olderRecordFormats = []olderRecordFormat{
	{name: "before-quota-dir", noQuotaDir: true, noQuotaGen: true, longSource: true},
	{name: "before-quota-generation", noQuotaGen: true, longSource: true},
	{name: "before-short-sources", longSource: true},
}

// record is nodevol.json as the driver writes it: emptydir's record,
// field for field, in its order and with its JSON names (emptydir does not
// export it). A record of this version that has a field this mirror lacks
// fails the upgrade test: a change of the format comes with its entry in
// olderRecordFormats and its records in testdata.
type record struct {
	Medium         string          `json:"medium"`
	SizeLimit      int64           `json:"sizeLimit,omitempty"`
	SizeBytes      int64           `json:"sizeBytes,omitempty"`
	Mode           *uint32         `json:"mode,omitempty"`
	StickyBit      bool            `json:"stickyBit,omitempty"`
	HugePageSize   int64           `json:"hugePageSize,omitempty"`
	QuotaProjectID uint32          `json:"quotaProjectID,omitempty"`
	QuotaDirDev    uint64          `json:"quotaDirDev,omitempty"`
	QuotaDirIno    uint64          `json:"quotaDirIno,omitempty"`
	QuotaDirGen    uint32          `json:"quotaDirGen,omitempty"`
	QuotaPending   bool            `json:"quotaPending,omitempty"`
	Mount          *mountRecord    `json:"mount,omitempty"`
	Location       *locationRecord `json:"location,omitempty"`
}

type mountRecord struct {
	UniqueID uint64 `json:"uniqueID,omitempty"`
	ID       uint64 `json:"id"`
	Dev      uint64 `json:"dev"`
	FSType   string `json:"fsType"`
	Source   string `json:"source"`
	DirDev   uint64 `json:"dirDev,omitempty"`
	DirIno   uint64 `json:"dirIno,omitempty"`
	Pending  bool   `json:"pending,omitempty"`
}

type locationRecord struct {
	PodUID string `json:"podUID"`
	Plugin string `json:"plugin"`
	Dir    string `json:"dir"`
	Sub    string `json:"sub,omitempty"`
	Meta   string `json:"meta"`
}

// decodeRecord reads a record, refusing a field the mirror does not have.
func decodeRecord(t *testing.T, b []byte) *record {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m record
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return &m
}

func readOlderRecord(t *testing.T, f olderRecordFormat, medium string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "records", f.name+"-"+strings.ToLower(medium)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encodeRecord is the record's bytes as every version writes them.
func encodeRecord(t *testing.T, m *record) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// longLocatedSource is the long source the earlier versions gave the tmpfs
// of a located volume: 16 random hex digits and 16 of a digest binding
// them to the volume's location.
func longLocatedSource(nonce string, l *locationRecord) string {
	h := sha256.Sum256([]byte("nodevol-emptydir-located\x00" + nonce + "\x00" + l.PodUID + "\x00" + l.Plugin + "\x00" + l.Dir + "/" + l.Sub + "\x00" + l.Meta))
	return "nodevol-emptydir-" + nonce + "-" + hex.EncodeToString(h[:8])
}

// TestOlderRecordsDecode: every field of each earlier version's records is
// one this version reads (nothing dropped), the records are re-encoded
// byte for byte from what it reads (so that the upgrade test below writes
// records exactly as those versions did), each lacks what its version
// lacked, and a Memory record's long source is the one recomputed from its
// random part and location.
func TestOlderRecordsDecode(t *testing.T) {
	for _, f := range olderRecordFormats {
		for _, medium := range []string{"Default", "Memory"} {
			t.Run(f.name+"/"+medium, func(t *testing.T) {
				b := readOlderRecord(t, f, medium)
				m := decodeRecord(t, b)
				if got := encodeRecord(t, m); !bytes.Equal(got, b) {
					t.Errorf("re-encoded\n%s\nwant the earlier version's\n%s", got, b)
				}
				if m.Medium != medium || m.Location == nil {
					t.Fatalf("record %+v: not a located %s volume", m, medium)
				}
				if medium == "Default" {
					if m.QuotaProjectID == 0 {
						t.Error("no quota project in the Default record")
					}
					if (m.QuotaDirIno == 0) != f.noQuotaDir || (m.QuotaDirGen == 0) != f.noQuotaGen {
						t.Errorf("quota directory %d/%d generation %d; want the format's fields only", m.QuotaDirDev, m.QuotaDirIno, m.QuotaDirGen)
					}
					return
				}
				src := m.Mount.Source
				nonce, ok := strings.CutPrefix(src, "nodevol-emptydir-")
				if !ok || len(nonce) != 33 || !f.longSource {
					t.Fatalf("source %q: want the long form", src)
				}
				if want := longLocatedSource(nonce[:16], m.Location); src != want {
					t.Errorf("source %q; recomputed %q", src, want)
				}
			})
		}
	}
}

// TestUpgradeFromOlderRecords: a volume published by an earlier version —
// its record in that version's format, a Memory volume's tmpfs with that
// version's source — is measured, republished and torn down by this
// version, as the kubelet calls it after the DaemonSet's update: stats
// answer, a republish keeps the volume and its files (the same tmpfs), and
// the unpublish leaves no target, record, mount, quota project or limit.
func TestUpgradeFromOlderRecords(t *testing.T) {
	mounttest.RequireMounts(t)
	// Directories take project IDs (fsxattr) on XFS without quotas.
	base := mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f")
	i := 0
	for _, f := range olderRecordFormats {
		for _, medium := range []string{"Default", "Memory"} {
			for _, republish := range []bool{false, true} {
				name := f.name + "/" + medium
				if republish {
					name += "/republished"
				}
				i++
				dir := filepath.Join(base, fmt.Sprintf("case-%02d", i))
				t.Run(name, func(t *testing.T) { runUpgradeFromOlderRecord(t, dir, f, medium, republish) })
			}
		}
	}
}

// handedOver is a volume published by a driver on a kubelet root of its
// own in dir (with quotas: bookkeeping and stand-in limits beside it),
// for another driver to take over.
type handedOver struct {
	c                   csiCrashCase
	target, pod, record string
}

const handedOverUID = "0b5e3c1a-2222-4222-8333-444455556666"

// publishToHandOver publishes a volume of the medium with this version.
func publishToHandOver(t *testing.T, dir, medium string) handedOver {
	t.Helper()
	c := csiCrashCase{Root: filepath.Join(dir, "kubelet"), Files: filepath.Join(dir, "files")}
	for _, d := range []string{c.Root, c.Files} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	v := handedOver{c: c, target: crashTarget(c.Root, handedOverUID, "vol"), pod: filepath.Join(c.Root, "pods", handedOverUID)}
	v.record = filepath.Join(v.pod, "plugins", "kubernetes.io~empty-dir", "csi_vol", "nodevol.json")
	if err := os.MkdirAll(filepath.Dir(v.target), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := crashPublish(crashDriver(t, c, nil), v.target, handedOverUID, medium); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // what a failed check left mounted
		for mounttest.IsMountRoot(t, v.target) {
			_ = unix.Unmount(v.target, unix.MNT_DETACH)
		}
	})
	return v
}

// nothingLeft checks that the unpublished volume left no target, record,
// mount, quota project or limit.
func (v handedOver) nothingLeft(t *testing.T) {
	t.Helper()
	for _, p := range []string{v.target, filepath.Dir(v.record)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", p, err)
		}
	}
	if ms := mountsUnder(t, v.pod); len(ms) > 0 {
		t.Errorf("mounts left under the pod: %v", ms)
	}
	projects, _ := os.ReadFile(filepath.Join(v.c.Files, "projects"))
	if strings.Contains(string(projects), v.target) {
		t.Errorf("the volume's project is left in the bookkeeping: %q", projects)
	}
	limits, err := (&mounttest.FileQuotaKernel{Path: filepath.Join(v.c.Files, "limits.json")}).Limits()
	if err != nil || len(limits) != 0 {
		t.Errorf("project limits left: %v, %v", limits, err)
	}
}

func runUpgradeFromOlderRecord(t *testing.T, dir string, f olderRecordFormat, medium string, republish bool) {
	v := publishToHandOver(t, dir, medium)
	c, uid, target, recPath := v.c, handedOverUID, v.target, v.record
	writeOlderRecord(t, f, medium, target, recPath)
	mounttest.Build(t, target, "file data/a from-the-pod", "file data/b/c more")
	snap := mounttest.Sentinels(t, filepath.Join(target, "data"))
	var before mountIDs
	if medium == "Memory" {
		before = statMount(t, target)
	}

	// The DaemonSet's new pod: this version, on what the old one left.
	d := crashDriver(t, c, nil)
	stats := func(when string) {
		resp, err := d.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target})
		if err != nil {
			t.Fatalf("NodeGetVolumeStats %s: %v", when, err)
		}
		for _, u := range resp.GetUsage() {
			if u.GetUnit() == csi.VolumeUsage_BYTES && (u.GetTotal() <= 0 || u.GetUsed() < 0) {
				t.Errorf("NodeGetVolumeStats %s: bytes %+v", when, u)
			}
		}
		t.Logf("NodeGetVolumeStats %s: %v", when, resp.GetUsage())
	}
	stats("of the earlier version's volume")
	if republish {
		if err := crashPublish(d, target, uid, medium); err != nil {
			t.Fatalf("republish: %v", err)
		}
		mounttest.Intact(t, filepath.Join(target, "data"), snap)
		if medium == "Memory" {
			if after := statMount(t, target); after != before {
				t.Errorf("the republished Memory volume is mount %+v; want the earlier version's tmpfs %+v", after, before)
			}
			if ms := mountsUnder(t, target); len(ms) != 1 {
				t.Errorf("mounts on the target after the republish: %v; want the one tmpfs", ms)
			}
		}
		stats("after the republish")
	}
	if err := crashUnpublish(d, target); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	v.nothingLeft(t)
}

// writeOlderRecord makes the volume this version published at target what
// the earlier version f would have left: its record in f's format (its
// fields only, encoded as f's code did), and for a Memory volume with a
// long source a tmpfs mounted with one in place of this version's.
func writeOlderRecord(t *testing.T, f olderRecordFormat, medium, target, recPath string) {
	t.Helper()
	b, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeRecord(t, b)
	if got := encodeRecord(t, m); !bytes.Equal(got, b) {
		t.Fatalf("this version's record\n%s\nre-encoded as\n%s", b, got)
	}
	if f.noQuotaDir {
		m.QuotaDirDev, m.QuotaDirIno = 0, 0
	}
	if f.noQuotaGen {
		m.QuotaDirGen = 0
	}
	if medium == "Memory" && f.longSource {
		var nonce [8]byte
		if _, err := unix.Getrandom(nonce[:], 0); err != nil {
			t.Fatal(err)
		}
		src := longLocatedSource(hex.EncodeToString(nonce[:]), m.Location)
		if err := unix.Unmount(target, 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(src, target, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0777", m.SizeBytes)); err != nil {
			t.Fatal(err)
		}
		ms := statMount(t, target)
		m.Mount.Source, m.Mount.UniqueID, m.Mount.ID, m.Mount.Dev = src, ms.UniqueID, ms.ID, ms.Dev
	}
	old := encodeRecord(t, m)
	if got, want := jsonKeys(t, old), jsonKeys(t, readOlderRecord(t, f, medium)); got != want {
		t.Fatalf("the record written has the fields %s; the earlier version's %s", got, want)
	}
	if err := os.WriteFile(recPath, old, 0o600); err != nil {
		t.Fatal(err)
	}
}

// jsonKeys lists an object's keys in order, nested objects' in braces.
func jsonKeys(t *testing.T, b []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	var out strings.Builder
	expectKey := []bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch v := tok.(type) {
		case json.Delim:
			out.WriteString(string(v))
			switch v {
			case '{':
				expectKey = append(expectKey, true)
			case '}':
				expectKey = expectKey[:len(expectKey)-1]
				if len(expectKey) > 0 {
					expectKey[len(expectKey)-1] = true
				}
			}
			continue
		default:
			if n := len(expectKey); n > 0 {
				if expectKey[n-1] {
					fmt.Fprintf(&out, "%v ", v)
				}
				expectKey[n-1] = !expectKey[n-1]
			}
		}
	}
	return out.String()
}

// mountIDs is a mount's identity as a record has it.
type mountIDs struct{ UniqueID, ID, Dev uint64 }

// statMount is the identity of the mount path is the root of.
func statMount(t *testing.T, path string) mountIDs {
	t.Helper()
	var ids mountIDs
	for _, mask := range []int{unix.STATX_MNT_ID_UNIQUE, unix.STATX_MNT_ID} {
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, mask, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mask&uint32(mask) == 0 {
			continue // a kernel without unique mount IDs
		}
		if mask == unix.STATX_MNT_ID {
			ids.ID = st.Mnt_id
		} else {
			ids.UniqueID = st.Mnt_id
		}
		ids.Dev = unix.Mkdev(st.Dev_major, st.Dev_minor)
	}
	return ids
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
}

// TestRecordsOfANewerVersion: this version as the one rolled back to. A
// record with a field it does not know is read without it; a Memory
// volume whose tmpfs has a source in a form it does not make cannot be
// proven its own: stats and unpublish refuse, naming the tmpfs and what to
// do, and delete nothing; once the tmpfs is unmounted by hand, the next
// unpublish removes the volume.
func TestRecordsOfANewerVersion(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f")
	for _, medium := range []string{"Default", "Memory"} {
		t.Run(medium, func(t *testing.T) {
			v := publishToHandOver(t, filepath.Join(base, medium), medium)
			c, target, recPath := v.c, v.target, v.record
			b, err := os.ReadFile(recPath)
			if err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			rec["quotaFromANewerVersion"] = 7
			newSource := ""
			if medium == "Memory" {
				// A source this version does not make, on a tmpfs of the
				// record's identity.
				newSource = "nv2-0123456789abcdef"
				if err := unix.Unmount(target, 0); err != nil {
					t.Fatal(err)
				}
				if err := unix.Mount(newSource, target, "tmpfs", 0, "size=4m,mode=0777"); err != nil {
					t.Fatal(err)
				}
				ms := statMount(t, target)
				m := rec["mount"].(map[string]any)
				m["source"], m["uniqueID"], m["id"], m["dev"] = newSource, ms.UniqueID, ms.ID, ms.Dev
			}
			nb, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(recPath, append(nb, '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
			mounttest.Build(t, target, "file data/a from-the-pod")
			snap := mounttest.Sentinels(t, filepath.Join(target, "data"))

			d := crashDriver(t, c, nil)
			_, statsErr := d.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target})
			unpubErr := crashUnpublish(d, target)
			t.Logf("stats: %v", statsErr)
			t.Logf("unpublish: %v", unpubErr)
			if medium == "Default" {
				if statsErr != nil || unpubErr != nil {
					t.Fatalf("a Default record with a field this version does not know: stats %v, unpublish %v; want both to work", statsErr, unpubErr)
				}
			} else {
				for what, err := range map[string]error{"stats": statsErr, "unpublish": unpubErr} {
					if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), newSource) {
						t.Errorf("%s of a tmpfs with an unknown source: %v; want FAILED_PRECONDITION naming it", what, err)
					}
				}
				if !strings.Contains(unpubErr.Error(), "newer") {
					t.Errorf("the refusal %q does not say the record may be a newer version's", unpubErr)
				}
				mounttest.Intact(t, filepath.Join(target, "data"), snap)
				if !mounttest.IsMountRoot(t, target) {
					t.Fatal("the refusal unmounted the tmpfs")
				}
				// The operator's remedy: unmount it by hand.
				if err := unix.Unmount(target, 0); err != nil {
					t.Fatal(err)
				}
				if err := crashUnpublish(d, target); err != nil {
					t.Fatalf("unpublish after the tmpfs was unmounted by hand: %v", err)
				}
			}
			v.nothingLeft(t)
		})
	}
}
