package cli

import (
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/internal/testsupport/nodefixture"
)

// TestIncrementalScanSeesMountReplacedWithSameLine: the kernel reuses the
// lowest free classic mount ID, anonymous device number and peer group, so
// a Memory emptyDir's own tmpfs unmounted and replaced by another tmpfs of
// the same source and options (whoever can mount in the pod directory can
// read the source in the table) leaves a mount table line that is the same
// byte for byte. Only the unique mount ID tells the two apart, and the
// volume's record names the old one: a whole scan says the volume's mount
// is foreign; the incremental scan must say the same at its next scan,
// not at the next whole one.
func TestIncrementalScanSeesMountReplacedWithSameLine(t *testing.T) {
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatal("the kernel never gave the tmpfs replacing a volume's the same line")
		}
		root := scanNode(t, nodefixture.Shape{Pods: 20, Mounted: true})
		shm := emptyDirOf(root, 2, "shm") // a Memory emptyDir, its own tmpfs mounted
		c := newTestIncrementalScan()
		rep := incScan(t, c, root)
		if v := verdictOf(t, rep, shm); v != verdictInUse {
			t.Fatalf("%s: %s; want in-use (its own tmpfs)", shm, v)
		}
		incScan(t, c, root)
		if c.last.full || c.last.podsReexamined != 0 {
			t.Fatalf("scan with nothing changed: %+v; want nothing re-examined", c.last)
		}
		before := mountLine(t, shm)
		var flags uintptr
		for _, o := range strings.Split(before.Options, ",") {
			flags |= map[string]uintptr{"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC, "noatime": unix.MS_NOATIME}[o]
		}
		var data []string
		for _, o := range strings.Split(before.VFSOptions, ",") { // moby's name for the superblock's options
			if o != "rw" && o != "ro" {
				data = append(data, o)
			}
		}
		line, kept := mounttest.ReplaceKeepingLine(t, shm, before.Source, "tmpfs", flags, strings.Join(data, ","))
		if !kept {
			continue // another process took the ID or the device number: a new node
		}
		t.Logf("replaced the tmpfs on %s; its line is unchanged: %+v", shm, line)
		rep = incScan(t, c, root) // fails when it differs from a whole scan
		if v := verdictOf(t, rep, shm); v != verdictDanger {
			t.Errorf("%s with its tmpfs replaced: %s; want danger", shm, v)
		}
		if c.last.full || c.last.podsReexamined != 1 {
			t.Errorf("scan after the replacement: %+v; want that pod alone re-examined", c.last)
		}
		return
	}
}

// mountLine is the mount table's line of the mount on dir.
func mountLine(t *testing.T, dir string) *mountinfo.Info {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil || len(ms) != 1 {
		t.Fatalf("the mount on %s: %v, %v", dir, ms, err)
	}
	return ms[0]
}
