package driver

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodevol/nodevol/volume"
)

const testRoot = "/var/lib/kubelet"

func TestParseTarget(t *testing.T) {
	const uid = "4f6b1d2e-0000-4000-8000-000000000001"
	good := testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/mount"
	layout, err := volume.NewLayout(testRoot)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := parseTarget(layout, good)
	if err != nil || tg.podUID != uid || tg.volume != "scratch" || tg.path != good {
		t.Fatalf("parseTarget(%s) = %+v, %v", good, tg, err)
	}
	if loc := tg.location(); loc.Plugin != "kubernetes.io/csi" || loc.Dir != "scratch" || loc.Sub != "mount" || loc.Meta != "csi_scratch" {
		t.Errorf("location = %+v", loc)
	}
	if volume.ValidateVolumeName(tg.location().Meta) == nil {
		t.Errorf("metadata name %q is a valid volume name: an ordinary emptyDir could have it", tg.location().Meta)
	}
	for _, bad := range []string{
		"",
		"relative/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/mount",
		good + "/",
		good + "/..",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/../scratch/mount",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi//scratch/mount",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/target",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~empty-dir/scratch/mount",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/scratch",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/mount/deeper",
		testRoot + "/pods/" + uid + "/plugins/kubernetes.io~csi/scratch/mount",
		testRoot + "/pods/../" + uid + "/volumes/kubernetes.io~csi/scratch/mount",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/./mount",
		testRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/Not_A_Label/mount",
		"/var/lib/kubelet2/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/mount",
		"/var/lib/other/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/mount",
		"/pods/" + uid + "/volumes/kubernetes.io~csi/scratch/mount",
	} {
		if tg, err := parseTarget(layout, bad); err == nil {
			t.Errorf("parseTarget(%q) = %+v; want an error", bad, tg)
		}
	}
}

func TestParseAttributes(t *testing.T) {
	eph := func(kv ...string) map[string]string {
		m := map[string]string{ctxEphemeral: "true", ctxPodName: "p", ctxPodNamespace: "ns", ctxPodUID: "u", kubeletPrefix + "serviceAccount.name": "default"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		vc     map[string]string
		medium volume.StorageMedium
		limit  int64
	}{
		{eph(), "", 0},
		{eph("medium", "Default"), "", 0},
		{eph("medium", "Memory", "sizeLimit", "1Gi"), volume.StorageMediumMemory, 1 << 30},
		{eph("sizeLimit", "1G"), "", 1_000_000_000},
		{eph("sizeLimit", "1.5Ki"), "", 1536},
		{eph("sizeLimit", "100m"), "", 1}, // a fraction of a byte rounds up
	} {
		a, err := parseAttributes(tc.vc)
		if err != nil || a.medium != tc.medium || a.sizeLimit != tc.limit || a.podName != "p" || a.podNamespace != "ns" || a.podUID != "u" {
			t.Errorf("parseAttributes(%v) = %+v, %v; want medium %q, limit %d", tc.vc, a, err, tc.medium, tc.limit)
		}
	}
	// Every problem is reported, not just the first.
	vc := map[string]string{"medium": "HugePages", "sizeLimit": "lots", "size": "1Gi", "Medium": "Memory"}
	_, err := parseAttributes(vc)
	if err == nil {
		t.Fatal("parseAttributes accepted a bad context")
	}
	for _, want := range []string{"not an inline ephemeral volume", `medium "HugePages"`, `sizeLimit "lots"`, `["Medium" "size"]`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for _, bad := range []map[string]string{
		eph("sizeLimit", "0"), eph("sizeLimit", "-1Gi"), eph("medium", "memory"),
		{ctxEphemeral: "false"}, {ctxEphemeral: "True"},
	} {
		if _, err := parseAttributes(bad); err == nil {
			t.Errorf("parseAttributes(%v) accepted it", bad)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{NodeID: "n", KubeletRoot: "relative"},
		{NodeID: "n", KubeletRoot: "/var/lib/kubelet/"},
		{NodeID: "", KubeletRoot: "/var/lib/kubelet"},
		{NodeID: "n", KubeletRoot: "/var/lib/kubelet", Name: "-bad"},
		{NodeID: "n", KubeletRoot: "/var/lib/kubelet", Name: strings.Repeat("a", 64)},
		{NodeID: "n", KubeletRoot: "/var/lib/kubelet", MemoryBytes: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted it", cfg)
		}
	}
	d, err := New(Config{NodeID: "n", KubeletRoot: "/var/lib/kubelet"})
	if err != nil || d.Name() != DefaultName {
		t.Fatalf("New = %v, %v", d, err)
	}
	unlock, err := d.lock("/x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.lock("/x"); status.Code(err) != codes.Aborted {
		t.Errorf("a second operation on the same target while the first is in flight: %v; want ABORTED", err)
	}
	unlock()
	if _, err := d.lock("/x"); err != nil {
		t.Errorf("the target stayed locked: %v", err)
	}
}

// TestParseAttributesSizeLimitOverflow: a sizeLimit beyond int64 bytes is
// an error naming it (or saturates at the largest int64, as ParseQuantity
// does for 8Ei): it must neither wrap to a negative number (2^63, which
// would fail with a confusing "negative sizeLimit") nor become 0 (100E,
// 1e30: no limit at all, tmpfs's default size and no quota).
func TestParseAttributesSizeLimitOverflow(t *testing.T) {
	for _, s := range []string{"9223372036854775808", "9223372036854775807.5", "8Ei", "100E", "1e30", "1e100", "99999999999999999999Ki"} {
		a, err := parseAttributes(map[string]string{ctxEphemeral: "true", AttrMedium: "Memory", AttrSizeLimit: s})
		if err == nil && a.sizeLimit != 1<<63-1 { // apimachinery saturates binary suffixes: harmless
			t.Errorf("sizeLimit %q: accepted as %d bytes; want an error (beyond int64 bytes)", s, a.sizeLimit)
		}
	}
	for s, want := range map[string]int64{"9223372036854775807": 1<<63 - 1, "1E": 1e18, "1.5": 2, "1Gi": 1 << 30} {
		if a, err := parseAttributes(map[string]string{ctxEphemeral: "true", AttrSizeLimit: s}); err != nil || a.sizeLimit != want {
			t.Errorf("sizeLimit %q = %d, %v; want %d", s, a.sizeLimit, err, want)
		}
	}
}
