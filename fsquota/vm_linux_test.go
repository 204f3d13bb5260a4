package fsquota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The TestVM* tests need a kernel with project quotas and an XFS
// filesystem mounted with -o prjquota, which this project's CI host does
// not have. hack/quota-vm-test.sh boots a stock Debian kernel in QEMU with
// such a mount and runs them there with NODEVOL_QUOTA_VM set to its mount
// point; everywhere else they skip.
const envQuotaVM = "NODEVOL_QUOTA_VM"

// vmMount returns a fresh directory on the prjquota mount, skipping unless
// the tests run inside the quota VM.
func vmMount(t *testing.T) string {
	t.Helper()
	mnt := os.Getenv(envQuotaVM)
	if mnt == "" {
		t.Skipf("skipping: needs a kernel with project quotas; runs inside the VM of hack/quota-vm-test.sh (%s=<prjquota xfs mount>)", envQuotaVM)
	}
	dir, err := os.MkdirTemp(mnt, strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// vmManager returns a real-kernel Manager with its own files and its own ID
// range, so the VM tests do not see each other's projects.
func vmManager(t *testing.T, firstID uint32, opts ...Option) (*Manager, bookkeeping) {
	bk := newBookkeeping(t)
	return New(append([]Option{WithProjectsFile(bk.projects), WithProjidFile(bk.projid), WithFirstID(firstID)}, opts...)...), bk
}

// fill writes to path until the write fails or max bytes are written and
// returns what was written and the error.
func fill(t *testing.T, path string, max int64) (int64, error) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	var total int64
	for total < max {
		chunk := buf
		if rest := max - total; rest < int64(len(chunk)) {
			chunk = chunk[:rest]
		}
		n, err := f.Write(chunk)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, f.Sync()
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
	r, err := m.open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	st, err := m.quota().state(r)
	if err != nil || !st.accounting || !st.enforcing {
		t.Errorf("Q_XGETQSTATV: %+v, %v; want accounting and enforcement on", st, err)
	}
	if mem := t.TempDir(); m.CheckSupport(mem) == nil {
		t.Errorf("CheckSupport(%q) on the initramfs = nil; want ErrNotSupported", mem)
	}
}

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
	u, err := m.ProjectUsage(vol)
	if err != nil || u.Bytes != 0 || u.Inodes != 1 || u.LimitBytes != limit {
		t.Errorf("ProjectUsage of the empty volume = %+v, %v; want 0 bytes, 1 inode (the directory), limit %d", u, err, limit)
	}

	// Usage follows what is written, in subdirectories too.
	if err := os.MkdirAll(filepath.Join(vol, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := fill(t, filepath.Join(vol, "a/b/four"), 4<<20); err != nil {
		t.Fatal(err)
	}
	bytes, inodes, err := m.Usage(vol)
	t.Logf("after 4 MiB: %d bytes, %d inodes", bytes, inodes)
	if err != nil || bytes < 4<<20 || bytes > 4<<20+64<<10 || inodes != 4 {
		t.Errorf("Usage = %d, %d, %v; want about 4 MiB and 4 inodes", bytes, inodes, err)
	}
	// The generic quotactl interface reads the same numbers.
	generic := New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid))
	generic.backend = &kernelQuota{generic: true}
	gu, err := generic.ProjectUsage(vol)
	if err != nil || gu != (Usage{Bytes: bytes, Inodes: inodes, LimitBytes: limit}) {
		t.Errorf("generic interface: %+v, %v; want %d bytes, %d inodes, limit %d", gu, err, bytes, inodes, limit)
	}

	// So does quotactl(2) on the block device, the fallback for kernels
	// without quotactl_fd.
	viaDev := New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid))
	kq := &kernelQuota{}
	kq.noFD.Store(true)
	viaDev.backend = kq
	du, err := viaDev.ProjectUsage(vol)
	if err != nil || du != gu {
		t.Errorf("quotactl on the block device: %+v, %v; want %+v", du, err, gu)
	}
	t.Logf("quotactl on the block device (%v) agrees with quotactl_fd", kq.devPath)

	// The hard limit stops writes; XFS says ENOSPC.
	written, err := fill(t, filepath.Join(vol, "big"), 2*limit)
	total := written + 4<<20
	t.Logf("writes stopped after %d bytes in the volume: %v", total, err)
	if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("writing 20 MiB under a 10 MiB limit: %v after %d bytes; want ENOSPC", err, written)
	}
	if total > limit || total < limit-256<<10 {
		t.Errorf("writes stopped at %d bytes; want at (or just under) the %d-byte limit", total, limit)
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
	if d, err := m.quota().get(mustOpen(t, m, root), id); err != nil || d.hardBytes != 0 {
		t.Errorf("limit after Clear = %+v, %v; want none", d, err)
	}

	// Once the volume is removed its ID has no usage and is handed out
	// again.
	if err := os.RemoveAll(vol); err != nil {
		t.Fatal(err)
	}
	syncfs(t, root)
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
	r, err := m.open(path)
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
	if n, err := fill(t, filepath.Join(vol, "f"), 3<<20); err != nil {
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
	if _, err := fill(t, filepath.Join(vol, "f"), 1<<20); err != nil {
		t.Fatal(err)
	}
	// A restarted process: a new Manager on the same files knows nothing
	// else.
	m2 := New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid), WithFirstID(FirstProjectID+3000), Enforce())
	if got, err := m2.Assign(vol, 5<<20); err != nil || got != id {
		t.Fatalf("Assign after restart = %d, %v; want the adopted %d", got, err, id)
	}
	if u, err := m2.ProjectUsage(vol); err != nil || u.Bytes < 1<<20 || u.LimitBytes != 5<<20 {
		t.Errorf("usage after restart = %+v, %v; want ≥ 1 MiB under a 5 MiB limit", u, err)
	}
	// A directory carrying an ID the files forgot is adopted too, and its
	// ID is not handed to anyone else.
	os.WriteFile(bk.projects, nil, 0o644)
	os.WriteFile(bk.projid, nil, 0o644)
	other := filepath.Join(root, "other")
	os.Mkdir(other, 0o777)
	otherID, err := m2.Assign(other, 0)
	if err != nil || otherID == id {
		t.Errorf("Assign(other) with the files wiped = %d, %v; want an ID other than the one in use (%d)", otherID, err, id)
	}
	if got, err := m2.Assign(vol, 5<<20); err != nil || got != id {
		t.Errorf("Assign(vol) with the files wiped = %d, %v; want %d adopted", got, err, id)
	}
	if err := m2.Clear(vol); err != nil {
		t.Fatal(err)
	}
	if p, _ := bk.read(t); strings.Contains(p, fmt.Sprintf("%d:", id)) {
		t.Errorf("ID %d still recorded after Clear:\n%s", id, p)
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
	if _, err := fill(t, filepath.Join(foreign, "f"), 64<<10); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(root, "vol")
	os.Mkdir(vol, 0o777)
	if id, err := m.Assign(vol, 0); err != nil || id != first+1 {
		t.Errorf("Assign = %d, %v; want %d (skipping %d, which has usage)", id, err, first+1, first)
	}
}
