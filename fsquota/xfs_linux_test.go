package fsquota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"golang.org/x/sys/unix"
)

// xfsDir returns a fresh directory on a loop-mounted XFS image (skipping
// without root, a private mount namespace or mkfs.xfs).
func xfsDir(t *testing.T) string {
	t.Helper()
	mnt := mounttest.LoopFS(t, "xfs", 512<<20, "", "-q", "-f")
	dir := filepath.Join(mnt, "pods")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mkdir(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustProjectID(t *testing.T, path string) uint32 {
	t.Helper()
	id, err := ProjectID(path)
	if err != nil {
		t.Fatalf("ProjectID(%q) = %v", path, err)
	}
	return id
}

func xflags(t *testing.T, path string) uint32 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	x, err := getFsxattr(fd)
	if err != nil {
		t.Fatal(err)
	}
	return x.Xflags
}

func TestFsxattrProjectIDOnXFS(t *testing.T) { checkProjectIDs(t, xfsDir(t)) }

// checkProjectIDs sets, reads back and clears a project ID on a new
// directory under root through the fsxattr ioctls and checks inheritance
// (FS_XFLAG_PROJINHERIT). The XFS loop test, the ext4 one and the VM
// tests share it.
func checkProjectIDs(t *testing.T, root string) {
	t.Helper()
	dir := mkdir(t, filepath.Join(root, "vol"))
	if got := mustProjectID(t, dir); got != 0 {
		t.Fatalf("ProjectID of a new directory = %d; want 0", got)
	}
	const id = 1048600
	if err := SetProjectID(dir, id); err != nil {
		t.Fatalf("SetProjectID(%q, %d) = %v", dir, id, err)
	}
	if got := mustProjectID(t, dir); got != id {
		t.Errorf("ProjectID after set = %d; want %d", got, id)
	}
	if xflags(t, dir)&fsXflagProjinherit == 0 {
		t.Error("directory lacks FS_XFLAG_PROJINHERIT after SetProjectID")
	}
	// Everything created below inherits the ID; subdirectories the flag.
	mounttest.Build(t, dir, "file f data", "dir sub/deeper", "file sub/deeper/g more", "symlink l f")
	for _, p := range []string{"f", "sub", "sub/deeper", "sub/deeper/g"} {
		if got := mustProjectID(t, filepath.Join(dir, p)); got != id {
			t.Errorf("ProjectID(%s) = %d; want the inherited %d", p, got, id)
		}
	}
	if xflags(t, filepath.Join(dir, "sub/deeper"))&fsXflagProjinherit == 0 {
		t.Error("subdirectory did not inherit FS_XFLAG_PROJINHERIT")
	}
	// A symlink is never opened through.
	if _, err := ProjectID(filepath.Join(dir, "l")); !errors.Is(err, unix.ELOOP) {
		t.Errorf("ProjectID(symlink) = %v; want ELOOP", err)
	}
	// Clearing drops the flag; new entries get no ID.
	if err := SetProjectID(dir, 0); err != nil {
		t.Fatal(err)
	}
	if xflags(t, dir)&fsXflagProjinherit != 0 {
		t.Error("FS_XFLAG_PROJINHERIT still set after SetProjectID(0)")
	}
	mounttest.Build(t, dir, "file after x")
	if got := mustProjectID(t, filepath.Join(dir, "after")); got != 0 {
		t.Errorf("file created after clearing has project %d; want 0", got)
	}
	// Files keep what they had.
	if got := mustProjectID(t, filepath.Join(dir, "f")); got != id {
		t.Errorf("old file's project = %d; want %d", got, id)
	}
}

// TestRealKernelQuotaCalls runs the real quotactl backend. On a kernel
// without quotas (this project's CI host) or an image mounted without
// prjquota, every quota call returns ErrUnsupported with the reason, and
// nothing is changed.
func TestRealKernelQuotaCalls(t *testing.T) {
	root := xfsDir(t)
	dir := mkdir(t, filepath.Join(root, "vol"))
	bk := newBookkeeping(t)
	m := paths(New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid), Enforce()))

	err := m.CheckSupport(dir)
	if err == nil {
		t.Skip("this kernel has project quotas on the loop image; the VM tests cover that case")
	}
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("CheckSupport(%q) = %v; want an *UnsupportedError matching ErrUnsupported and errors.ErrUnsupported", dir, err)
	}
	if ue.Reason == "" || ue.Path != dir {
		t.Errorf("UnsupportedError = %+v; want the path and a reason", ue)
	}
	t.Logf("reason: %v", err)
	// The fallback state (no quotactl_fd, the device cache) is shared by
	// goroutines; -race checks it.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.CheckSupport(dir); !errors.Is(err, ErrUnsupported) {
				t.Errorf("concurrent CheckSupport = %v", err)
			}
		}()
	}
	wg.Wait()
	if err := m.CheckSupport(dir); !errors.Is(err, ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("CheckSupport = %v; want ErrUnsupported (no error of another kind)", err)
	}
	if id, err := m.Assign(dir, 10<<20); !errors.Is(err, ErrUnsupported) || id != 0 {
		t.Errorf("Assign = %d, %v; want 0, ErrUnsupported", id, err)
	}
	if got := mustProjectID(t, dir); got != 0 {
		t.Errorf("Assign on an unsupported filesystem tagged the directory with %d", got)
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("Assign on an unsupported filesystem wrote bookkeeping: %q, %q", p, q)
	}
	if err := SetProjectID(dir, 1048599); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Usage(dir); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Usage = %v; want ErrUnsupported (emptydir then walks)", err)
	}
	// Clear still undoes what it can without quotas: the ID the files
	// record for the directory, and the files.
	if err := os.WriteFile(bk.projects, fmt.Appendf(nil, "1048599:%s\n", dir), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Clear(dir); err != nil {
		t.Errorf("Clear on an unsupported filesystem = %v; want nil", err)
	}
	if got := mustProjectID(t, dir); got != 0 {
		t.Errorf("ProjectID after Clear = %d; want 0", got)
	}
}

func TestUnsupportedFilesystem(t *testing.T) {
	m, _ := fakeManager(t, newFake())
	dir := t.TempDir()
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	if magic := uint32(sfs.Type); magic == magicXFS || magic == magicExt4 {
		// Still exercise the magic check on a memory filesystem.
		dir = mounttest.MemTempDir(t)
		if err := unix.Statfs(dir, &sfs); err != nil || uint32(sfs.Type) == magicXFS || uint32(sfs.Type) == magicExt4 {
			t.Skip("no filesystem other than xfs/ext4 to test on")
		}
	}
	err := m.CheckSupport(dir)
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "neither xfs nor ext4") {
		t.Errorf("CheckSupport(%q) = %v; want an *UnsupportedError naming the filesystem", dir, err)
	}
	if _, err := m.Assign(dir, 0); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Assign = %v; want ErrUnsupported", err)
	}
}

func TestAssignUsageClear(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, bk := fakeManager(t, fake)
	os.WriteFile(bk.projects, []byte("# by hand\nweird line\n"), 0o644)
	os.WriteFile(bk.projid, []byte("admin:42\n"), 0o644)

	a, b := mkdir(t, filepath.Join(root, "a")), mkdir(t, filepath.Join(root, "b"))
	idA, err := m.Assign(a, 10<<20)
	if err != nil || idA != FirstProjectID {
		t.Fatalf("Assign(a) = %d, %v; want %d", idA, err, FirstProjectID)
	}
	if again, err := m.Assign(a, 10<<20); err != nil || again != idA {
		t.Errorf("second Assign(a) = %d, %v; want the same %d", again, err, idA)
	}
	idB, err := m.Assign(b, 0)
	if err != nil || idB != idA+1 {
		t.Fatalf("Assign(b) = %d, %v; want %d", idB, err, idA+1)
	}
	if got := mustProjectID(t, a); got != idA {
		t.Errorf("ProjectID(a) = %d; want %d", got, idA)
	}
	if xflags(t, a)&fsXflagProjinherit == 0 {
		t.Error("assigned directory lacks FS_XFLAG_PROJINHERIT")
	}
	if fake.limits[idA] != 0 {
		t.Errorf("monitoring-only Manager set a limit of %d", fake.limits[idA])
	}
	projects, projid := bk.read(t)
	wantProjects := fmt.Sprintf("# by hand\nweird line\n%d:%s\n%d:%s\n", idA, a, idB, b)
	wantProjid := fmt.Sprintf("admin:42\nvolume%d:%d\nvolume%d:%d\n", idA, idA, idB, idB)
	if projects != wantProjects || projid != wantProjid {
		t.Errorf("files = %q, %q; want %q, %q", projects, projid, wantProjects, wantProjid)
	}

	fake.usage[idA] = dquot{bytes: 8192, inodes: 3}
	if bytes, inodes, err := m.Usage(a); err != nil || bytes != 8192 || inodes != 3 {
		t.Errorf("Usage(a) = %d, %d, %v; want 8192, 3", bytes, inodes, err)
	}
	if u, err := m.ProjectUsage(a); err != nil || u.Bytes != 8192 || u.Inodes != 3 {
		t.Errorf("ProjectUsage(a) = %+v, %v; want 8192 bytes, 3 inodes", u, err)
	}
	plain := mkdir(t, filepath.Join(root, "plain"))
	if _, _, err := m.Usage(plain); !errors.Is(err, ErrNoProject) {
		t.Errorf("Usage of a directory without a project = %v; want ErrNoProject", err)
	}

	delete(fake.usage, idA)
	if err := m.Clear(a); err != nil {
		t.Fatalf("Clear(a) = %v", err)
	}
	if got := mustProjectID(t, a); got != 0 {
		t.Errorf("ProjectID(a) after Clear = %d; want 0", got)
	}
	if err := m.Clear(a); err != nil {
		t.Errorf("second Clear(a) = %v; want nil", err)
	}
	projects, projid = bk.read(t)
	wantProjects = fmt.Sprintf("# by hand\nweird line\n%d:%s\n", idB, b)
	wantProjid = fmt.Sprintf("admin:42\nvolume%d:%d\n", idB, idB)
	if projects != wantProjects || projid != wantProjid {
		t.Errorf("files after Clear = %q, %q; want %q, %q", projects, projid, wantProjects, wantProjid)
	}
	// The released ID is handed out again.
	c := mkdir(t, filepath.Join(root, "c"))
	if idC, err := m.Assign(c, 0); err != nil || idC != idA {
		t.Errorf("Assign(c) after Clear(a) = %d, %v; want the released %d", idC, err, idA)
	}
	// A directory that is gone has its bookkeeping removed.
	os.RemoveAll(b)
	if err := m.Clear(b); err != nil {
		t.Errorf("Clear of a removed directory = %v", err)
	}
	if projects, _ := bk.read(t); strings.Contains(projects, b) {
		t.Errorf("entry for the removed directory survived Clear:\n%s", projects)
	}
}

func TestEnforceSetsHardLimit(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, _ := fakeManager(t, fake, Enforce())
	dir := mkdir(t, filepath.Join(root, "v"))
	id, err := m.Assign(dir, 10<<20)
	if err != nil {
		t.Fatal(err)
	}
	if fake.limits[id] != 10<<20 {
		t.Errorf("hard limit = %d; want %d", fake.limits[id], 10<<20)
	}
	if err := m.Clear(dir); err != nil {
		t.Fatal(err)
	}
	if fake.limits[id] != 0 {
		t.Errorf("hard limit after Clear = %d; want 0", fake.limits[id])
	}
	// Without a size there is no limit even when enforcing.
	id, _ = m.Assign(dir, 0)
	if fake.limits[id] != 0 {
		t.Errorf("hard limit for size 0 = %d; want none", fake.limits[id])
	}
}

func TestAdoptionAfterRestart(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m1, bk := fakeManager(t, fake)
	dir := mkdir(t, filepath.Join(root, "vol"))
	id, err := m1.Assign(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	p1, q1 := bk.read(t)

	// A new process: new Manager, same files, same directory.
	m2 := paths(New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid)))
	m2.backend = fake
	if got, err := m2.Assign(dir, 0); err != nil || got != id {
		t.Errorf("Assign after restart = %d, %v; want the adopted %d", got, err, id)
	}
	if p2, q2 := bk.read(t); p2 != p1 || q2 != q1 {
		t.Errorf("adoption changed the files: %q %q; were %q %q", p2, q2, p1, q1)
	}
	// Clear needs nothing but the path.
	if err := m2.Clear(dir); err != nil {
		t.Fatal(err)
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("files after Clear = %q, %q; want empty", p, q)
	}
}

// TestUnrecordedIDIsNotAdopted: a directory carrying an ID the files
// record nowhere (its owner may tag it with anyone's project) gets an ID
// of its own; the foreign project is neither recorded, limited nor
// cleared.
func TestUnrecordedIDIsNotAdopted(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, bk := fakeManager(t, fake, Enforce())
	dir := mkdir(t, filepath.Join(root, "vol"))
	const foreign = 2000000
	fake.limits[foreign] = 5 << 20
	if err := SetProjectID(dir, foreign); err != nil {
		t.Fatal(err)
	}
	id, err := m.Assign(dir, 1<<20)
	if err != nil || id != FirstProjectID {
		t.Errorf("Assign of a directory carrying unrecorded ID %d = %d, %v; want a new %d", foreign, id, err, FirstProjectID)
	}
	if p, _ := bk.read(t); p != fmt.Sprintf("%d:%s\n", FirstProjectID, dir) {
		t.Errorf("projects = %q; want only the new ID recorded", p)
	}
	if fake.limits[foreign] != 5<<20 || mustProjectID(t, dir) != FirstProjectID {
		t.Errorf("foreign limit %d, directory's ID %d; want the foreign limit kept and the new ID on the directory", fake.limits[foreign], mustProjectID(t, dir))
	}
	// Tagged again with the foreign ID (by its owner): Clear releases its
	// own ID and leaves the foreign one where it is.
	if err := SetProjectID(dir, foreign); err != nil {
		t.Fatal(err)
	}
	if err := m.Clear(dir); err != nil {
		t.Fatal(err)
	}
	if fake.limits[foreign] != 5<<20 || mustProjectID(t, dir) != foreign || xflags(t, dir)&fsXflagProjinherit == 0 {
		t.Errorf("after Clear: foreign limit %d, ID %d, flags %#x; want the foreign project untouched", fake.limits[foreign], mustProjectID(t, dir), xflags(t, dir))
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("files after Clear = %q, %q; want empty", p, q)
	}
}

func TestInheritedIDIsNotAdopted(t *testing.T) {
	root := xfsDir(t)
	m, bk := fakeManager(t, newFake())
	parent := mkdir(t, filepath.Join(root, "parent"))
	parentID, err := m.Assign(parent, 0)
	if err != nil {
		t.Fatal(err)
	}
	child := mkdir(t, filepath.Join(parent, "child"))
	if got := mustProjectID(t, child); got != parentID {
		t.Fatalf("child did not inherit: %d", got)
	}
	childID, err := m.Assign(child, 0)
	if err != nil || childID == parentID {
		t.Fatalf("Assign(child) = %d, %v; want an ID of its own, not the parent's %d", childID, err, parentID)
	}
	if err := m.Clear(child); err != nil {
		t.Fatal(err)
	}
	if got := mustProjectID(t, parent); got != parentID {
		t.Errorf("Clear(child) touched the parent: %d", got)
	}
	// A directory that only inherited its ID (never assigned) is left alone
	// by Clear, and the parent's ID is not released.
	other := mkdir(t, filepath.Join(parent, "other"))
	if err := m.Clear(other); err != nil {
		t.Fatal(err)
	}
	if got := mustProjectID(t, other); got != parentID {
		t.Errorf("Clear of an inheriting directory changed its ID to %d", got)
	}
	if p, _ := bk.read(t); !strings.Contains(p, fmt.Sprintf("%d:%s", parentID, parent)) {
		t.Errorf("parent's entry lost:\n%s", p)
	}
}

func TestRecordedButUntaggedIsReused(t *testing.T) {
	root := xfsDir(t)
	m, bk := fakeManager(t, newFake())
	dir := mkdir(t, filepath.Join(root, "vol"))
	// A crash after the bookkeeping was written, before the directory was
	// tagged.
	os.WriteFile(bk.projects, fmt.Appendf(nil, "1048590:%s\n", dir), 0o644)
	if id, err := m.Assign(dir, 0); err != nil || id != 1048590 {
		t.Errorf("Assign = %d, %v; want the recorded 1048590", id, err)
	}
	if got := mustProjectID(t, dir); got != 1048590 {
		t.Errorf("ProjectID = %d; want 1048590", got)
	}
	// And a crash in the same place before Clear: Clear removes the entry.
	os.WriteFile(bk.projects, fmt.Appendf(nil, "1048591:%s/x\n", root), 0o644)
	if err := m.Clear(filepath.Join(root, "x")); err != nil {
		t.Fatal(err)
	}
	if p, _ := bk.read(t); p != "" {
		t.Errorf("projects after Clear = %q; want empty", p)
	}
}

func TestAllocationSkips(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, bk := fakeManager(t, fake)
	os.WriteFile(bk.projects, []byte("1048577:/elsewhere/a\ngarbage\n"), 0o644)
	os.WriteFile(bk.projid, []byte("old:1048578\nvolume1048579:7\n"), 0o644)
	fake.usage[1048580] = dquot{bytes: 4096, inodes: 1}
	fake.usage[1048581] = dquot{hardBytes: 1 << 20}
	fake.limits[1048581] = 1 << 20
	fake.usage[1048582] = dquot{inodes: 1}
	dir := mkdir(t, filepath.Join(root, "v"))
	if id, err := m.Assign(dir, 0); err != nil || id != 1048583 {
		t.Errorf("Assign = %d, %v; want 1048583 (skipping recorded IDs, a clashing name, usage and limits)", id, err)
	}
	p, q := bk.read(t)
	if !strings.HasPrefix(p, "1048577:/elsewhere/a\ngarbage\n") || !strings.HasPrefix(q, "old:1048578\nvolume1048579:7\n") {
		t.Errorf("existing lines not preserved: %q %q", p, q)
	}
}

func TestAllocationIsBounded(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	fake.usedFrom = 100 // every candidate in use
	m, bk := fakeManager(t, fake, WithMaxProbes(5), WithFirstID(100))
	dir := mkdir(t, filepath.Join(root, "v"))
	if _, err := m.Assign(dir, 0); !errors.Is(err, ErrNoFreeID) {
		t.Errorf("Assign with every probed ID in use = %v; want ErrNoFreeID", err)
	}
	if fake.gets != 5 {
		t.Errorf("allocation asked about %d IDs; want the bound, 5", fake.gets)
	}
	if got := mustProjectID(t, dir); got != 0 {
		t.Errorf("failed Assign tagged the directory with %d", got)
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("failed Assign wrote bookkeeping: %q %q", p, q)
	}
}

// TestAllocationEscapesAUsedRun: a run of IDs from the first one made to
// look used (files tagged with them, which a container's root can do) does
// not exhaust allocation: past half of its probes it draws at random from
// the whole range, within its bound.
func TestAllocationEscapesAUsedRun(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	const first, run = 1048577, 100000
	for id := uint32(first); id < first+run; id++ {
		fake.usage[id] = dquot{inodes: 1}
	}
	m, _ := fakeManager(t, fake, WithMaxProbes(8))
	for i := range 20 {
		dir := mkdir(t, filepath.Join(root, fmt.Sprint("v", i)))
		fake.gets = 0
		id, err := m.Assign(dir, 0)
		if err != nil || id < first+run || id > maxProjectID {
			t.Fatalf("Assign past a run of %d used IDs = %d, %v; want an ID above the run", run, id, err)
		}
		if fake.gets > 8 {
			t.Errorf("allocation asked about %d IDs; want at most 8", fake.gets)
		}
	}
}

// openFd opens path for a test with flags (O_CLOEXEC added), closed when
// the test ends.
func openFd(t *testing.T, path string, flags int) int {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestAssignRefusesNonDirectory: a descriptor of a symlink (O_PATH,
// O_NOFOLLOW) or a file is refused, and nothing it points to is tagged.
func TestAssignRefusesNonDirectory(t *testing.T) {
	root := xfsDir(t)
	m, bk := fakeManager(t, newFake())
	real := mkdir(t, filepath.Join(root, "real"))
	link := filepath.Join(root, "link")
	os.Symlink(real, link)
	mounttest.Build(t, root, "file f data")
	for _, fd := range []int{
		openFd(t, link, unix.O_PATH|unix.O_NOFOLLOW),
		openFd(t, filepath.Join(root, "f"), unix.O_RDONLY),
	} {
		if _, err := m.Manager.Assign(fd, link, 0); !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("Assign(non-directory) = %v; want ENOTDIR", err)
		}
	}
	if got := mustProjectID(t, real); got != 0 {
		t.Errorf("Assign of a symlink's descriptor tagged its target with %d", got)
	}
	if p, q := bk.read(t); p != "" || q != "" {
		t.Errorf("refused Assign wrote bookkeeping: %q %q", p, q)
	}
}

// TestDescriptorNotPath: Assign, Usage and Clear act on the descriptor
// they are handed (O_PATH ones included) and never open the path, which
// here names another directory altogether: that one is never tagged.
func TestDescriptorNotPath(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, bk := fakeManager(t, fake, Enforce())
	vol, decoy := mkdir(t, filepath.Join(root, "vol")), mkdir(t, filepath.Join(root, "decoy"))
	fd := openFd(t, vol, unix.O_PATH|unix.O_DIRECTORY)
	p, err := m.Manager.Assign(fd, decoy, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Stat(vol, &st)
	if p.ID != FirstProjectID || p.Dev != uint64(st.Dev) || p.Ino != st.Ino {
		t.Errorf("Assign = %+v; want project %d on vol (device %d, inode %d)", p, FirstProjectID, st.Dev, st.Ino)
	}
	if got, dec := mustProjectID(t, vol), mustProjectID(t, decoy); got != p.ID || dec != 0 {
		t.Errorf("vol carries %d, decoy %d; want %d on vol only", got, dec, p.ID)
	}
	if projects, _ := bk.read(t); projects != fmt.Sprintf("%d:%s\n", p.ID, decoy) {
		t.Errorf("projects = %q; want the path recorded as given", projects)
	}
	fake.usage[p.ID] = dquot{bytes: 4096, inodes: 1}
	if u, err := m.Manager.Usage(fd, decoy); err != nil || u.ProjectID != p.ID || u.Bytes != 4096 || u.LimitBytes != 1<<20 {
		t.Errorf("Usage = %+v, %v; want vol's project, 4096 bytes, a 1 MiB limit", u, err)
	}
	if err := m.Manager.Clear(fd, decoy, p); err != nil {
		t.Fatal(err)
	}
	if got := mustProjectID(t, vol); got != 0 || fake.limits[p.ID] != 0 {
		t.Errorf("after Clear: vol carries %d, limit %d; want both gone", got, fake.limits[p.ID])
	}
}

// TestClearOnlyTheAssignedDirectory: Clear handed a directory other than
// the one Assign returned the project for — one swapped into its place,
// even carrying the same ID — releases the recorded ID (bookkeeping,
// limit) and leaves that directory's project and flags alone.
func TestClearOnlyTheAssignedDirectory(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, bk := fakeManager(t, fake, Enforce())
	vol := mkdir(t, filepath.Join(root, "vol"))
	p, err := m.Manager.Assign(openFd(t, vol, unix.O_RDONLY|unix.O_DIRECTORY), vol, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// Another directory, with the same ID and the inherit flag (its owner
	// tagged it), takes the volume's name.
	if err := os.Rename(vol, filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	other := mkdir(t, vol)
	if err := SetProjectID(other, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Manager.Clear(openFd(t, other, unix.O_RDONLY|unix.O_DIRECTORY), vol, p); err != nil {
		t.Fatal(err)
	}
	if got := mustProjectID(t, other); got != p.ID || xflags(t, other)&fsXflagProjinherit == 0 {
		t.Errorf("the directory in the volume's place carries %d, flags %#x; want its own project and flags kept", got, xflags(t, other))
	}
	if got := mustProjectID(t, filepath.Join(root, "moved")); got != p.ID {
		t.Errorf("the assigned directory, moved away, carries %d; want %d (Clear never reached it)", got, p.ID)
	}
	if projects, projid := bk.read(t); projects != "" || projid != "" || fake.limits[p.ID] != 0 {
		t.Errorf("after Clear: files %q %q, limit %d; want the recorded ID released", projects, projid, fake.limits[p.ID])
	}
}

// TestIdentitySurvivesRenumbering: the directory is known by its inode
// number and generation, not the device number a reboot may change; with
// no generation (a filesystem without one) the device decides; an inode
// number reused by another directory has another generation.
func TestIdentitySurvivesRenumbering(t *testing.T) {
	root := xfsDir(t)
	vol := mkdir(t, filepath.Join(root, "vol"))
	r, err := ref(openFd(t, vol, unix.O_RDONLY|unix.O_DIRECTORY), vol)
	if err != nil {
		t.Fatal(err)
	}
	if r.gen == 0 {
		t.Fatal("XFS gave no inode generation")
	}
	p := r.project(7)
	for _, tc := range []struct {
		name string
		p    Project
		want bool
	}{
		{"as assigned", p, true},
		{"device renumbered", Project{ID: 7, Dev: p.Dev + 1, Ino: p.Ino, Gen: p.Gen}, true},
		{"inode number reused", Project{ID: 7, Dev: p.Dev, Ino: p.Ino, Gen: p.Gen + 1}, false},
		{"another inode", Project{ID: 7, Dev: p.Dev, Ino: p.Ino + 1, Gen: p.Gen}, false},
		{"no generation, same device", Project{ID: 7, Dev: p.Dev, Ino: p.Ino}, true},
		{"no generation, other device", Project{ID: 7, Dev: p.Dev + 1, Ino: p.Ino}, false},
		{"no identity", Project{ID: 7}, true},
	} {
		if got := r.is(&tc.p); got != tc.want {
			t.Errorf("%s: is(%+v) = %v; want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

// TestRelease: Release, for a directory that is gone, clears the limits of
// the IDs recorded for the path on the filesystem of the directory it is
// handed and releases them, and takes no project off that directory even
// when it carries one of them; with -1 only the bookkeeping goes.
func TestRelease(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, bk := fakeManager(t, fake, Enforce())
	vol := mkdir(t, filepath.Join(root, "vol"))
	p, err := m.Manager.Assign(openFd(t, vol, unix.O_RDONLY|unix.O_DIRECTORY), vol, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := SetProjectID(root, p.ID); err != nil { // the parent, tagged by someone
		t.Fatal(err)
	}
	if err := m.Manager.Release(openFd(t, root, unix.O_PATH|unix.O_DIRECTORY), vol); err != nil {
		t.Fatal(err)
	}
	if projects, projid := bk.read(t); projects != "" || projid != "" || fake.limits[p.ID] != 0 {
		t.Errorf("after Release: files %q %q, limit %d; want the ID released", projects, projid, fake.limits[p.ID])
	}
	if got := mustProjectID(t, root); got != p.ID {
		t.Errorf("Release took the project off the directory it was handed (%d)", got)
	}
	q, err := m.Manager.Assign(openFd(t, vol, unix.O_RDONLY|unix.O_DIRECTORY), vol, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Manager.Release(-1, vol); err != nil {
		t.Fatal(err)
	}
	if projects, _ := bk.read(t); projects != "" || fake.limits[q.ID] != 1<<20 {
		t.Errorf("after Release(-1): projects %q, limit %d; want the bookkeeping gone and the limit kept", projects, fake.limits[q.ID])
	}
}

func TestSupportCache(t *testing.T) {
	root := xfsDir(t)
	fake := newFake()
	m, _ := fakeManager(t, fake)
	dir := mkdir(t, filepath.Join(root, "v"))
	if _, err := m.Assign(dir, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := m.CheckSupport(dir); err != nil {
			t.Fatal(err)
		}
	}
	if fake.stateCalls != 1 {
		t.Errorf("state asked %d times for one mount; want 1 (cached)", fake.stateCalls)
	}
	// Accounting turned off behind our back: the next quota call says so
	// and the cached positive is dropped.
	fake.getErr, fake.off = unix.ESRCH, true
	if _, _, err := m.Usage(dir); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Usage with accounting off = %v; want ErrUnsupported", err)
	}
	if err := m.CheckSupport(dir); !errors.Is(err, ErrUnsupported) || fake.stateCalls != 2 {
		t.Errorf("CheckSupport after = %v (state asked %d times); want a fresh negative answer", err, fake.stateCalls)
	}
	// Negative answers are not cached.
	m.CheckSupport(dir)
	if fake.stateCalls != 3 {
		t.Errorf("negative answer was cached (state asked %d times)", fake.stateCalls)
	}
	fake.getErr, fake.off = nil, false
	if err := m.CheckSupport(dir); err != nil {
		t.Errorf("CheckSupport after accounting came back = %v", err)
	}
}

func TestConcurrentAssign(t *testing.T) {
	root := xfsDir(t)
	m, bk := fakeManager(t, newFake())
	var wg sync.WaitGroup
	ids := make([]uint32, 12)
	for i := range ids {
		dir := mkdir(t, filepath.Join(root, fmt.Sprint(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := m.Assign(dir, 0)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	slices.Sort(ids)
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Errorf("IDs handed out twice: %v", ids)
	}
	p, _ := bk.read(t)
	if n := strings.Count(p, "\n"); n != len(ids) {
		t.Errorf("%d projects lines; want %d:\n%s", n, len(ids), p)
	}
}
