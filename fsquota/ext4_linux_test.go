package fsquota

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

// ext4's project quotas need two features: project (a project ID in every
// inode) and quota with a project quota inode. The quota calls against
// ext4 with both run in the quota VM (hack/quota-vm-test.sh); these tests
// cover what a loop-mounted image on the CI host shows.
var ext4ProjectFeatures = []string{"-q", "-F", "-O", "quota,project", "-E", "quotatype=prjquota"}

// unsupportedOn checks that err is an *UnsupportedError for path whose
// reason contains want.
func unsupportedOn(t *testing.T, what string, err error, path, want string) {
	t.Helper()
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) || ue.Path != path || !strings.Contains(ue.Reason, want) {
		t.Errorf("%s = %v; want an *UnsupportedError for %s saying %q", what, err, path, want)
		return
	}
	t.Logf("%s: %v", what, err)
}

// TestExt4ProjectIDs: on ext4 with the project feature the fsxattr
// ioctls set and read project IDs with inheritance. A kernel built without
// the quota format (QFMT_V2, like this project's CI host) mounts such a
// filesystem read-only only; the test then plants the IDs offline with
// debugfs and checks that they read back, and that the quota calls say
// why they cannot work.
func TestExt4ProjectIDs(t *testing.T) {
	img := mounttest.LoopImage(t, "ext4", 64<<20, ext4ProjectFeatures...)
	mnt, err := mounttest.MountLoop(t, img, "ext4", "")
	if err == nil {
		checkProjectIDs(t, mnt)
		m, _ := vmManager(t, FirstProjectID)
		if err := m.CheckSupport(mnt); err != nil {
			unsupportedOn(t, "CheckSupport", err, mnt, "")
		}
		return
	}
	t.Logf("read-write mount refused (%v); checking project IDs planted with debugfs on a read-only mount", err)
	debugfs, lerr := exec.LookPath("debugfs")
	if lerr != nil {
		mounttest.Skip(t, "no read-write mount of ext4 with the project feature here, and no debugfs to prepare one")
	}
	const id = 1048600
	const ext4ProjinheritFl = 0x20000000 // EXT4_PROJINHERIT_FL, the on-disk flag behind FS_XFLAG_PROJINHERIT
	run := func(cmd string) string {
		t.Helper()
		out, err := exec.Command(debugfs, "-w", "-R", cmd, img).CombinedOutput()
		if err != nil {
			t.Fatalf("debugfs -R %q: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	run("mkdir vol")
	run("mkdir vol/sub")
	for _, p := range []string{"vol", "vol/sub"} {
		m := regexp.MustCompile(`Flags: 0x([0-9a-f]+)`).FindStringSubmatch(run("stat " + p))
		if m == nil {
			t.Fatalf("no flags in debugfs stat %s", p)
		}
		flags, _ := strconv.ParseUint(m[1], 16, 32)
		run(fmt.Sprintf("set_inode_field %s flags 0x%x", p, flags|ext4ProjinheritFl))
		run(fmt.Sprintf("set_inode_field %s projid %d", p, id))
	}
	mnt, err = mounttest.MountLoop(t, img, "ext4", "ro")
	if err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(mnt, "vol")
	for _, p := range []string{vol, filepath.Join(vol, "sub")} {
		if got := mustProjectID(t, p); got != id {
			t.Errorf("ProjectID(%s) = %d; want %d", p, got, id)
		}
		if xflags(t, p)&fsXflagProjinherit == 0 {
			t.Errorf("%s: FS_XFLAG_PROJINHERIT not reported for EXT4_PROJINHERIT_FL", p)
		}
	}
	if got := mustProjectID(t, mnt); got != 0 {
		t.Errorf("ProjectID of the root = %d; want 0", got)
	}
	if err := SetProjectID(vol, id+1); !errors.Is(err, unix.EROFS) {
		t.Errorf("SetProjectID on a read-only mount = %v; want EROFS", err)
	}
	// The quota calls: no accounting on a filesystem whose quota inodes
	// the kernel cannot load.
	m, bk := vmManager(t, FirstProjectID)
	unsupportedOn(t, "CheckSupport", m.CheckSupport(vol), vol, "accounting is off (ext4 needs the project and quota features")
	if _, _, err := m.Usage(vol); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Usage = %v; want ErrUnsupported", err)
	}
	if _, err := m.Assign(vol, 1<<20); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Assign = %v; want ErrUnsupported", err)
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("Assign wrote bookkeeping: %q, %q", p, q)
	}
}

// TestExt4WithoutProjectFeature: ext4 made without the project feature
// (the mkfs.ext4 default) cannot carry project IDs; setting one, and the
// quota calls, say so.
func TestExt4WithoutProjectFeature(t *testing.T) {
	img := mounttest.LoopImage(t, "ext4", 64<<20, "-q", "-F", "-O", "^project,^quota")
	mnt, err := mounttest.MountLoop(t, img, "ext4", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := mkdir(t, filepath.Join(mnt, "vol"))
	if got := mustProjectID(t, dir); got != 0 {
		t.Errorf("ProjectID = %d; want 0", got)
	}
	unsupportedOn(t, "SetProjectID", SetProjectID(dir, 1048600), dir, "project feature")
	if got := mustProjectID(t, dir); got != 0 {
		t.Errorf("ProjectID after a refused set = %d; want 0", got)
	}
	if err := SetProjectID(dir, 0); err != nil {
		t.Errorf("SetProjectID(0) = %v; want nil (nothing to clear)", err)
	}
	m, bk := vmManager(t, FirstProjectID, Enforce())
	// Such an ext4 has no Q_XGETQSTATV: quotactl_fd says ENOSYS, which
	// once made every later call of the Manager go to the block device
	// (as if the kernel had no quotactl_fd) and was reported as "no
	// quotactl". Q_GETINFO tells the truth: accounting is off.
	err = m.CheckSupport(dir)
	unsupportedOn(t, "CheckSupport", err, dir, "accounting is off (ext4 needs the project and quota features")
	if !errors.Is(err, unix.ESRCH) {
		t.Errorf("CheckSupport = %v; want the ESRCH of Q_GETINFO", err)
	}
	if kq := m.backend.(*kernelQuota); haveQuotactlFD() && kq.noFD.Load() {
		t.Error("an ENOSYS for one quota command made the Manager give up quotactl_fd")
	}
	if id, err := m.Assign(dir, 1<<20); !errors.Is(err, ErrUnsupported) || id != 0 {
		t.Errorf("Assign = %d, %v; want ErrUnsupported", id, err)
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("Assign wrote bookkeeping: %q, %q", p, q)
	}
	if err := m.Clear(dir); err != nil {
		t.Errorf("Clear = %v; want nil (nothing to undo)", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Error(err)
	}
}
