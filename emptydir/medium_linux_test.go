package emptydir

import (
	"testing"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// TestInfoFromTableMedium: the medium of a mount known only from the
// mount table follows its type, as Detect's would.
func TestInfoFromTableMedium(t *testing.T) {
	for fsType, want := range map[string]volume.Medium{"tmpfs": volume.MediumMemory, "hugetlbfs": volume.MediumHugePages, "ext4": volume.MediumDefault, "nfs4": volume.MediumDefault} {
		info := mountdetect.Entry{Path: "/v"}.InfoFromTable(mountdetect.Mount{MountPoint: "/v", FSType: fsType})
		if got := MediumOf(info); got != want || info.FSType != fsType || !info.MountPoint {
			t.Errorf("MediumOf(Entry.InfoFromTable(%s)) = %v (%+v); want %v", fsType, got, info, want)
		}
	}
}
