package emptydir

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// quotaWorld is a kubelet root on a loop-mounted XFS (real project IDs)
// with an enforcing fsquota.Manager whose limits a stand-in kernel keeps
// in a file, as the crash tests do on a kernel without quotas.
type quotaWorld struct {
	img, mnt string
	files    string
	kernel   *mounttest.FileQuotaKernel
	q        *fsquota.Manager
	e        *env
}

func newQuotaWorld(t *testing.T, opts ...fsquota.Option) *quotaWorld {
	t.Helper()
	img := mounttest.LoopImage(t, "xfs", 300<<20, "-q", "-f")
	mnt, err := mounttest.MountLoop(t, img, "xfs", "")
	if err != nil {
		t.Fatal(err)
	}
	w := &quotaWorld{img: img, mnt: mnt, files: t.TempDir()}
	w.kernel = &mounttest.FileQuotaKernel{Path: filepath.Join(w.files, "limits.json")}
	w.q = fsquota.New(append([]fsquota.Option{
		fsquota.WithProjectsFile(filepath.Join(w.files, "projects")),
		fsquota.WithProjidFile(filepath.Join(w.files, "projid")),
		fsquota.Enforce(), quotaTestKernel(w.kernel),
	}, opts...)...)
	w.e = newEnv(t, filepath.Join(mnt, "kubelet"), nil, WithQuotas(w.q))
	return w
}

// limitedSpec is a Default volume with a sizeLimit: an enforced limit.
func limitedSpec(name string) volume.Spec {
	return volume.Spec{Name: name, EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}}
}

// bookkeeping returns the projects and projid files' contents.
func (w *quotaWorld) bookkeeping(t *testing.T) (projects, projid string) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(w.files, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return string(b)
	}
	return read("projects"), read("projid")
}

// remountOnAnotherDevice unmounts w's filesystem and mounts its image again
// on the same directory through another loop device, as a reboot does when
// the disk comes back under another device number (device-mapper and NVMe
// minors are handed out at boot): same filesystem, same inodes, another
// st_dev.
func (w *quotaWorld) remountOnAnotherDevice(t *testing.T) {
	t.Helper()
	var before unix.Stat_t
	if err := unix.Stat(w.mnt, &before); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("umount", w.mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v: %s", w.mnt, err, out)
	}
	// Hold the loop device the image had (the first free one now), so the
	// image gets another.
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", hold).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	held := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", held).Run() })
	if out, err := exec.Command("mount", "-t", "xfs", "-o", "loop", w.img, w.mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount %s again: %v: %s", w.img, err, out)
	}
	var after unix.Stat_t
	if err := unix.Stat(w.mnt, &after); err != nil {
		t.Fatal(err)
	}
	if after.Dev == before.Dev || after.Ino != before.Ino {
		t.Fatalf("remounted with device %#x, inode %d; want another device than %#x and the same inode %d", after.Dev, after.Ino, before.Dev, before.Ino)
	}
}

// TestQuotaTearDownAfterDeviceNumberChange: a Default volume with a quota
// is set up; the node reboots, and its disk comes back with another
// device number (the filesystem, its inodes and project IDs unchanged);
// the pod was deleted meanwhile. TearDown must tear the volume down and
// release its project: the directory is the very one SetUp assigned (same
// inode on the same filesystem), nothing was swapped.
func TestQuotaTearDownAfterDeviceNumberChange(t *testing.T) {
	w := newQuotaWorld(t)
	m := w.e.setUp(t, w.e.pod(limitedSpec("cache")), "cache")
	md, err := readMetadata(w.e.metaDir(t, "cache"))
	if err != nil || md == nil || md.QuotaProjectID == 0 || md.QuotaDirIno == 0 {
		t.Fatalf("record after SetUp = %+v, %v; want a project with its directory's identity", md, err)
	}

	w.remountOnAnotherDevice(t)

	for i := range 3 { // the volume manager retries with backoff
		if err = w.e.tearDown("cache"); err == nil {
			break
		}
		t.Logf("TearDown %d: %v", i+1, err)
	}
	if err != nil {
		t.Fatalf("TearDown of the untouched volume after its filesystem's device number changed = %v; want it torn down", err)
	}
	mustNotExist(t, m.Path())
	if p, q := w.bookkeeping(t); p != "" || q != "" {
		t.Errorf("bookkeeping after TearDown = %q, %q; want the project released", p, q)
	}
	if limits, err := w.kernel.Limits(); err != nil || len(limits) != 0 {
		t.Errorf("limits after TearDown = %v, %v; want none", limits, err)
	}
}
