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
		if b, err := json.Marshal(&Metadata{Medium: m}); err != nil || string(b) != want {
			t.Errorf("json.Marshal(Metadata{Medium: %v}) = %s, %v; want %s", m, b, err, want)
		}
	}
}
