package fsquota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// The TestVM* tests need a kernel with project quotas and an XFS or ext4
// filesystem mounted with -o prjquota, which this project's CI host does
// not have. hack/quota-vm-test.sh boots a stock Debian kernel in QEMU with
// such mounts and runs them there once per filesystem, with
// NODEVOL_QUOTA_VM set to the mount point and NODEVOL_QUOTA_VM_FS to its
// type ("xfs", the default, or "ext4"); everywhere else they skip.
const (
	envQuotaVM   = "NODEVOL_QUOTA_VM"
	envQuotaVMFS = "NODEVOL_QUOTA_VM_FS"
)

// vmFS is the type of the filesystem the VM tests run on.
func vmFS() string {
	if fs := os.Getenv(envQuotaVMFS); fs != "" {
		return fs
	}
	return "xfs"
}

// vmMount returns a fresh directory on the prjquota mount, skipping unless
// the tests run inside the quota VM. It fails when the mount is not the
// filesystem NODEVOL_QUOTA_VM_FS names, so a harness mistake cannot test
// one filesystem twice.
func vmMount(t *testing.T) string {
	t.Helper()
	mnt := os.Getenv(envQuotaVM)
	if mnt == "" {
		t.Skipf("skipping: needs a kernel with project quotas; runs inside the VM of hack/quota-vm-test.sh (%s=<prjquota xfs or ext4 mount>, %s=xfs|ext4)", envQuotaVM, envQuotaVMFS)
	}
	want := map[string]uint32{"xfs": magicXFS, "ext4": magicExt4}[vmFS()]
	var sfs unix.Statfs_t
	if err := unix.Statfs(mnt, &sfs); err != nil {
		t.Fatal(err)
	}
	if want == 0 || uint32(sfs.Type) != want {
		t.Fatalf("%s=%s is filesystem 0x%x; %s=%q wants xfs or ext4 and that it matches", envQuotaVM, mnt, uint32(sfs.Type), envQuotaVMFS, vmFS())
	}
	dir, err := os.MkdirTemp(mnt, strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// vmManager returns a real-kernel Manager with its own files and its own ID
// range, so the VM tests do not see each other's projects.
func vmManager(t *testing.T, firstID uint32, opts ...Option) (*byPath, bookkeeping) {
	bk := newBookkeeping(t)
	return paths(New(append([]Option{WithProjectsFile(bk.projects), WithProjidFile(bk.projid), WithFirstID(firstID)}, opts...)...)), bk
}

func syncfs(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatal(err)
	}
}

func TestVMSupport(t *testing.T) {
	root := vmMount(t)
	m, _ := vmManager(t, FirstProjectID)
	if err := m.CheckSupport(root); err != nil {
		t.Fatalf("CheckSupport(%q) = %v; want nil on a prjquota mount", root, err)
	}
	r, err := m.openPath(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	st, err := m.quota().state(r)
	if err != nil || !st.accounting || !st.enforcing {
		t.Errorf("Q_XGETQSTATV: %+v, %v; want accounting and enforcement on", st, err)
	}
	if mem := t.TempDir(); m.CheckSupport(mem) == nil {
		t.Errorf("CheckSupport(%q) on the initramfs = nil; want ErrUnsupported", mem)
	}
}

// TestVMProjectIDs runs the fsxattr checks of the loop-image tests on the
// VM's filesystem (ext4 project IDs cannot be set on the CI host: its
// kernel refuses to mount ext4 with the project feature read-write).
func TestVMProjectIDs(t *testing.T) { checkProjectIDs(t, vmMount(t)) }

func TestVMAssignUsageEnforceClear(t *testing.T) {
	root := vmMount(t)
	const limit = 10 << 20
	m, bk := vmManager(t, FirstProjectID+1000, Enforce())
	vol := filepath.Join(root, "vol")
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	id, err := m.Assign(vol, limit)
	if err != nil {
		t.Fatalf("Assign(%q, 10 MiB) = %v", vol, err)
	}
	if id != FirstProjectID+1000 {
		t.Errorf("Assign = %d; want the first ID of the range, %d", id, FirstProjectID+1000)
	}
	if got := mustProjectID(t, vol); got != id {
		t.Errorf("ProjectID = %d; want %d", got, id)
	}
	// The directory itself is charged: one inode, and its blocks (none on
	// XFS, where a small directory lives in the inode; one 4 KiB block on
	// ext4, moved to the project when its ID was set).
	var st unix.Stat_t
	if err := unix.Stat(vol, &st); err != nil {
		t.Fatal(err)
	}
	dirBytes := st.Blocks * 512
	u, err := m.ProjectUsage(vol)
	if err != nil || u.Bytes != dirBytes || u.Inodes != 1 || u.LimitBytes != limit {
		t.Errorf("ProjectUsage of the empty volume = %+v, %v; want %d bytes (the directory's blocks), 1 inode (the directory), limit %d", u, err, dirBytes, limit)
	}
	t.Logf("empty volume: %+v", u)

	// Usage follows what is written, in subdirectories too.
	if err := os.MkdirAll(filepath.Join(vol, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := mounttest.Fill(t, filepath.Join(vol, "a/b/four"), 4<<20); err != nil {
		t.Fatal(err)
	}
	// What the project is charged is what its inodes hold (st_blocks).
	// That can be more than 4 MiB: XFS may keep blocks it allocated past
	// the file's end (speculative preallocation) when the close that
	// would trim them finds the inode busy, until a background worker
	// does; they are charged and counted in st_blocks alike.
	bytes, inodes, err := m.Usage(vol)
	held, _ := mounttest.LstatUsage(t, vol)
	t.Logf("after 4 MiB: %d bytes, %d inodes; the tree's inodes hold %d bytes", bytes, inodes, held)
	if err != nil || bytes < 4<<20 || bytes != held || inodes != 4 {
		t.Errorf("Usage = %d, %d, %v; want at least 4 MiB, what the tree's 4 inodes hold (%d bytes), and 4 inodes", bytes, inodes, err, held)
	}
	// The generic quotactl interface reads the same numbers.
	generic := paths(New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid)))
	generic.backend = &kernelQuota{generic: true}
	gu, err := generic.ProjectUsage(vol)
	if err != nil || gu != (Usage{Bytes: bytes, Inodes: inodes, LimitBytes: limit, ProjectID: id}) {
		t.Errorf("generic interface: %+v, %v; want %d bytes, %d inodes, limit %d, project %d", gu, err, bytes, inodes, limit, id)
	}

	// So does quotactl(2) on the block device, the fallback for kernels
	// without quotactl_fd.
	viaDev := paths(New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid)))
	kq := &kernelQuota{}
	kq.noFD.Store(true)
	viaDev.backend = kq
	du, err := viaDev.ProjectUsage(vol)
	if err != nil || du != gu {
		t.Errorf("quotactl on the block device: %+v, %v; want %+v", du, err, gu)
	}
	t.Logf("quotactl on the block device (%v) agrees with quotactl_fd", kq.devPath)

	// The hard limit stops a writer without CAP_SYS_RESOURCE (a pod).
	// XFS reports an exceeded project quota as ENOSPC (like a full
	// filesystem, which is what the project's statfs shows), ext4 as
	// EDQUOT.
	written, err := mounttest.FillWithoutCapSysResource(t, filepath.Join(vol, "big"), 2*limit)
	total := written + 4<<20
	t.Logf("writes stopped after %d bytes in the volume: %v", total, err)
	wantErr := map[string]error{"xfs": unix.ENOSPC, "ext4": unix.EDQUOT}[vmFS()]
	if !errors.Is(err, wantErr) {
		t.Fatalf("writing 20 MiB under a 10 MiB limit on %s: %v after %d bytes; want %v", vmFS(), err, written, wantErr)
	}
	if after, _, err := m.Usage(vol); err != nil || after > limit {
		t.Errorf("usage at the limit = %d, %v; want at most %d", after, err, limit)
	}
	if total > limit || total < limit-256<<10 {
		t.Errorf("writes stopped at %d bytes; want at (or just under) the %d-byte limit", total, limit)
	}
	// Root keeps CAP_SYS_RESOURCE: XFS stops it too, ext4 lets it past the
	// hard limit (documented on Enforce).
	// (Appending to the file that hit the limit: XFS refuses even to
	// create a new inode in a project over its block limit.)
	n, err := mounttest.Fill(t, filepath.Join(vol, "big"), 1<<20)
	t.Logf("a writer with CAP_SYS_RESOURCE at the limit: %d bytes, %v", n, err)
	switch vmFS() {
	case "xfs":
		if !errors.Is(err, unix.ENOSPC) {
			t.Errorf("xfs: root wrote %d bytes past the project limit (%v); want ENOSPC", n, err)
		}
	case "ext4":
		if err != nil {
			t.Errorf("ext4: root writing past the project limit: %v after %d bytes; want it allowed (CAP_SYS_RESOURCE)", err, n)
		}
	}

	// Clear: limit gone, directory untagged, ID released from the files.
	if err := m.Clear(vol); err != nil {
		t.Fatalf("Clear = %v", err)
	}
	if got := mustProjectID(t, vol); got != 0 {
		t.Errorf("ProjectID after Clear = %d; want 0", got)
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("bookkeeping after Clear = %q, %q; want empty", p, q)
	}
	if d, err := m.quota().get(mustOpen(t, m.Manager, root), id); err != nil || d.hardBytes != 0 {
		t.Errorf("limit after Clear = %+v, %v; want none", d, err)
	}

	// Once the volume is removed its ID has no usage and is handed out
	// again. XFS (Linux 5.14+) inactivates unlinked inodes in a background
	// worker, and only then gives their blocks and inodes back to the
	// project; syncfs does not wait for it. So wait until the kernel shows
	// the project empty: allocation rightly skips an ID that still has
	// usage.
	if err := os.RemoveAll(vol); err != nil {
		t.Fatal(err)
	}
	syncfs(t, root)
	rootRef := mustOpen(t, m.Manager, root)
	start := time.Now()
	for {
		d, err := m.quota().get(rootRef, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.bytes == 0 && d.inodes == 0 {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("project %d still charged %d bytes and %d inodes a minute after its directory was removed", id, d.bytes, d.inodes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("project %d empty %v after the removal's syncfs", id, time.Since(start).Round(time.Millisecond))
	again := filepath.Join(root, "again")
	if err := os.Mkdir(again, 0o777); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Assign(again, limit); err != nil || got != id {
		t.Errorf("Assign after Clear and removal = %d, %v; want the released %d", got, err, id)
	}
}

func mustOpen(t *testing.T, m *Manager, path string) *fsRef {
	t.Helper()
	r, err := m.openPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r
}

func TestVMMonitoringOnly(t *testing.T) {
	root := vmMount(t)
	m, _ := vmManager(t, FirstProjectID+2000)
	vol := filepath.Join(root, "vol")
	os.Mkdir(vol, 0o777)
	if _, err := m.Assign(vol, 1<<20); err != nil {
		t.Fatal(err)
	}
	if n, err := mounttest.Fill(t, filepath.Join(vol, "f"), 3<<20); err != nil {
		t.Errorf("monitoring-only: writing 3 MiB under sizeLimit 1 MiB stopped at %d: %v", n, err)
	}
	if u, err := m.ProjectUsage(vol); err != nil || u.Bytes < 3<<20 || u.LimitBytes != 0 {
		t.Errorf("ProjectUsage = %+v, %v; want ≥ 3 MiB and no limit", u, err)
	}
}

func TestVMRestartAdoption(t *testing.T) {
	root := vmMount(t)
	m1, bk := vmManager(t, FirstProjectID+3000, Enforce())
	vol := filepath.Join(root, "vol")
	os.Mkdir(vol, 0o777)
	id, err := m1.Assign(vol, 5<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mounttest.Fill(t, filepath.Join(vol, "f"), 1<<20); err != nil {
		t.Fatal(err)
	}
	// A restarted process: a new Manager on the same files knows nothing
	// else.
	m2 := paths(New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid), WithFirstID(FirstProjectID+3000), Enforce()))
	if got, err := m2.Assign(vol, 5<<20); err != nil || got != id {
		t.Fatalf("Assign after restart = %d, %v; want the adopted %d", got, err, id)
	}
	if u, err := m2.ProjectUsage(vol); err != nil || u.Bytes < 1<<20 || u.LimitBytes != 5<<20 {
		t.Errorf("usage after restart = %+v, %v; want ≥ 1 MiB under a 5 MiB limit", u, err)
	}
	// An ID the files forgot is not handed to anyone else (it has
	// usage), and is not adopted either: nothing proves it nodevol's. The
	// directory gets a new one.
	os.WriteFile(bk.projects, nil, 0o644)
	os.WriteFile(bk.projid, nil, 0o644)
	other := filepath.Join(root, "other")
	os.Mkdir(other, 0o777)
	otherID, err := m2.Assign(other, 0)
	if err != nil || otherID == id {
		t.Errorf("Assign(other) with the files wiped = %d, %v; want an ID other than the one in use (%d)", otherID, err, id)
	}
	newID, err := m2.Assign(vol, 5<<20)
	if err != nil || newID == id || newID == otherID {
		t.Errorf("Assign(vol) with the files wiped = %d, %v; want a new ID, neither the forgotten %d nor other's %d", newID, err, id, otherID)
	}
	if err := m2.Clear(vol); err != nil {
		t.Fatal(err)
	}
	if p, _ := bk.read(t); strings.Contains(p, fmt.Sprintf("%d:", newID)) {
		t.Errorf("ID %d still recorded after Clear:\n%s", newID, p)
	}
}

func TestVMSkipsIDsWithUsage(t *testing.T) {
	root := vmMount(t)
	const first = FirstProjectID + 4000
	m, _ := vmManager(t, first)
	// Someone else's directory uses the first ID without any record.
	foreign := filepath.Join(root, "foreign")
	os.Mkdir(foreign, 0o777)
	if err := SetProjectID(foreign, first); err != nil {
		t.Fatal(err)
	}
	if _, err := mounttest.Fill(t, filepath.Join(foreign, "f"), 64<<10); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(root, "vol")
	os.Mkdir(vol, 0o777)
	if id, err := m.Assign(vol, 0); err != nil || id != first+1 {
		t.Errorf("Assign = %d, %v; want %d (skipping %d, which has usage)", id, err, first+1, first)
	}
}
