package emptydir

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func TestMediumOf(t *testing.T) {
	for _, c := range []struct {
		info mountdetect.FSInfo
		want volume.Medium
	}{
		{mountdetect.FSInfo{Magic: mountdetect.MagicTmpfs, MountPoint: true}, volume.MediumMemory},
		// hugetlbfs's magic does not fit in an int32: compared as uint32.
		{mountdetect.FSInfo{Magic: 0x958458f6, MountPoint: true}, volume.MediumHugePages},
		{mountdetect.FSInfo{Magic: uint32(int32(0x01021994)), MountPoint: true}, volume.MediumMemory},
		{mountdetect.FSInfo{Magic: mountdetect.MagicTmpfs}, volume.MediumDefault}, // a directory inside a tmpfs
		{mountdetect.FSInfo{Magic: mountdetect.MagicHugetlbfs}, volume.MediumDefault},
		{mountdetect.FSInfo{Magic: 0xef53, MountPoint: true}, volume.MediumDefault}, // ext4
		{mountdetect.FSInfo{}, volume.MediumDefault},
	} {
		if got := MediumOf(c.info); got != c.want {
			t.Errorf("MediumOf(%+v) = %v; want %v", c.info, got, c.want)
		}
	}
}

// TestMetadataMedium: nodevol.json files on disk keep parsing ("" is what
// older files hold for Default) and keep their bytes.
func TestMetadataMedium(t *testing.T) {
	for _, c := range []struct {
		json string
		want volume.Medium
		err  string
	}{
		{`{"medium":"Default"}`, volume.MediumDefault, ""},
		{`{"medium":""}`, volume.MediumDefault, ""},
		{`{}`, volume.MediumDefault, ""},
		{`{"medium":"Memory","mount":{"id":7,"dev":1,"fsType":"tmpfs","source":"x"}}`, volume.MediumMemory, ""},
		{`{"medium":"HugePages","hugePageSize":2097152,"mount":{"id":7,"dev":1,"fsType":"hugetlbfs","source":"x"}}`, volume.MediumHugePages, ""},
		{`{"medium":"Disk"}`, 0, "unknown medium"},
	} {
		m, err := parseMetadata([]byte(c.json), "nodevol.json")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseMetadata(%s) = %+v, %v; want an error saying %q", c.json, m, err, c.err)
			}
			continue
		}
		if err != nil || m.Medium != c.want {
			t.Errorf("parseMetadata(%s) = %+v, %v; want medium %v", c.json, m, err, c.want)
		}
	}
	for m, want := range map[volume.Medium]string{volume.MediumDefault: `{"medium":"Default"}`, volume.MediumMemory: `{"medium":"Memory"}`, volume.MediumHugePages: `{"medium":"HugePages"}`} {
		if b, err := json.Marshal(&metadata{Medium: m}); err != nil || string(b) != want {
			t.Errorf("json.Marshal(metadata{Medium: %v}) = %s, %v; want %s", m, b, err, want)
		}
	}
}

func TestMountSizes(t *testing.T) {
	const mi, gi = int64(1) << 20, int64(1) << 30
	pod := &volume.Pod{MemoryLimit: 10 * gi, HugePages: map[int64]int64{2 * mi: 100 * mi}}
	for _, tc := range []struct {
		src            volume.EmptyDirSource
		pod            *volume.Pod
		alloc          int64
		tmpfs, page    int64
		wantErrContain string
	}{
		{src: volume.EmptyDirSource{Medium: "Memory", SizeLimit: gi}, pod: pod, alloc: 16 * gi, tmpfs: gi},
		{src: volume.EmptyDirSource{Medium: "Memory"}, pod: pod, alloc: 16 * gi, tmpfs: 10 * gi},
		{src: volume.EmptyDirSource{Medium: "Memory"}, pod: &volume.Pod{}, alloc: 16 * gi, tmpfs: 16 * gi},
		{src: volume.EmptyDirSource{Medium: "Memory", SizeLimit: 20 * gi}, pod: pod, alloc: 16 * gi, tmpfs: 10 * gi},
		{src: volume.EmptyDirSource{Medium: "Memory"}, pod: nil, tmpfs: 0},
		{src: volume.EmptyDirSource{Medium: "HugePages"}, pod: pod, page: 2 * mi},
		{src: volume.EmptyDirSource{Medium: "HugePages-2Mi"}, pod: pod, page: 2 * mi},
		{src: volume.EmptyDirSource{Medium: "HugePages-1Gi"}, pod: pod, wantErrContain: "requests no huge pages of size 1Gi"},
		{src: volume.EmptyDirSource{}, pod: pod},
		{src: volume.EmptyDirSource{Medium: "Floppy"}, pod: pod, wantErrContain: `unknown emptyDir medium "Floppy"`},
	} {
		tmpfs, page, err := MountSizes(tc.src, tc.pod, tc.alloc)
		if tc.wantErrContain != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrContain) {
				t.Errorf("MountSizes(%+v) error = %v; want one containing %q", tc.src, err, tc.wantErrContain)
			}
			continue
		}
		if err != nil || tmpfs != tc.tmpfs || page != tc.page {
			t.Errorf("MountSizes(%+v, alloc %d) = %d, %d, %v; want %d, %d", tc.src, tc.alloc, tmpfs, page, err, tc.tmpfs, tc.page)
		}
	}
}

// TestEscapedPluginName checks the constant plugin directory name the
// plugin uses against the escaping of its name.
func TestEscapedPluginName(t *testing.T) {
	if got, err := volume.EscapePluginName(PluginName); err != nil || got != escapedPluginName {
		t.Errorf("EscapePluginName(%q) = %q, %v; the plugin uses %q", PluginName, got, err, escapedPluginName)
	}
}
