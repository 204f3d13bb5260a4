package mountdetect

import (
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestEntryAnswersAsFile: DetectEntry and MountsAtEntry take the mount
// IDs LookAt read instead of asking statx again; their answers must be
// DetectFile's and MountsAtFile's on the same descriptor — a plain
// directory, a mount root, stacked mounts, a mount beneath, a mount made
// through another bind mount of the directory's filesystem.
func TestEntryAnswersAsFile(t *testing.T) {
	requireMounts(t)
	base := t.TempDir()
	mounttest.Tmpfs(t, base, "")
	mounttest.Build(t, base, "file fs/plain/a x", "file fs/root/a x", "file fs/stacked/a x", "file fs/nested/sub/a x", "file fs/aliased/sub/a x")
	fs := filepath.Join(base, "fs")
	mounttest.Tmpfs(t, filepath.Join(fs, "root"), "")
	mounttest.Tmpfs(t, filepath.Join(fs, "stacked"), "")
	mounttest.Tmpfs(t, filepath.Join(fs, "stacked"), "")
	mounttest.Tmpfs(t, filepath.Join(fs, "nested/sub"), "")
	mounttest.Bind(t, fs, filepath.Join(base, "alias"))
	mounttest.Tmpfs(t, filepath.Join(base, "alias/aliased/sub"), "")
	tab, err := ReadMountTable()
	if err != nil {
		t.Fatal(err)
	}
	dirfd, err := unix.Open(fs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	for _, name := range []string{"plain", "root", "stacked", "nested", "aliased"} {
		for _, open := range []Open{OpenPath, OpenDir} {
			path := filepath.Join(fs, name)
			e, err := LookAt(dirfd, name, path, open)
			if err != nil {
				t.Fatal(err)
			}
			wantInfo, err := tab.DetectFile(e.Fd, path)
			if err != nil {
				t.Fatal(err)
			}
			info, err := tab.DetectEntry(e)
			if err != nil || !reflect.DeepEqual(info, wantInfo) {
				t.Errorf("DetectEntry(%s, open %d) = %+v, %v; want DetectFile's %+v", path, open, info, err, wantInfo)
			}
			wantAt, wantBeneath, err := tab.MountsAtFile(e.Fd, path)
			if err != nil {
				t.Fatal(err)
			}
			at, beneath, err := tab.MountsAtEntry(e)
			if err != nil || !reflect.DeepEqual(at, wantAt) || !reflect.DeepEqual(beneath, wantBeneath) {
				t.Errorf("MountsAtEntry(%s, open %d) = %q, %q, %v; want MountsAtFile's %q, %q", path, open, mountPoints(at), mountPoints(beneath), err, mountPoints(wantAt), mountPoints(wantBeneath))
			}
			if name != "plain" && len(wantAt)+len(wantBeneath) == 0 {
				t.Errorf("MountsAtFile(%s) found no mount: the case tests nothing", path)
			}
			e.Close()
		}
	}
}
