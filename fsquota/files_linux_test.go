package fsquota

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// bookkeeping is a pair of projects/projid files in a temporary directory.
type bookkeeping struct{ dir, projects, projid string }

func newBookkeeping(t testing.TB) bookkeeping {
	dir := t.TempDir()
	return bookkeeping{dir: dir, projects: filepath.Join(dir, "projects"), projid: filepath.Join(dir, "projid")}
}

func (b bookkeeping) read(t testing.TB) (projects, projid string) {
	t.Helper()
	p, err := os.ReadFile(b.projects)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	q, err := os.ReadFile(b.projid)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(p), string(q)
}

// recordNext is one bookkeeping transaction the way Assign does it: lock,
// pick the lowest ID neither file has, record path, write, unlock.
func recordNext(m *Manager, path string) (uint32, error) {
	t, err := m.begin()
	if err != nil {
		return 0, err
	}
	defer t.close()
	id := m.firstID
	for t.projects.hasID(id) || t.projid.hasID(id) {
		id++
	}
	if _, err := t.projects.add(id, path); err != nil {
		return 0, err
	}
	if err := t.writeProjects(); err != nil {
		return 0, err
	}
	if _, err := t.projid.add(m.nameFor(id), id); err != nil {
		return 0, err
	}
	return id, t.writeProjid()
}

const (
	envHelperDir = "FSQUOTA_TEST_HELPER_DIR"
	envHelperTag = "FSQUOTA_TEST_HELPER_TAG"
	envHelperN   = "FSQUOTA_TEST_HELPER_N"
)

// TestHelperProcessWriter is not a test: TestConcurrentProcesses runs the
// test binary again with this test selected and the environment set, to
// get writers in separate processes.
func TestHelperProcessWriter(t *testing.T) {
	dir := os.Getenv(envHelperDir)
	if dir == "" {
		t.Skip("helper process for TestConcurrentProcesses")
	}
	n, _ := strconv.Atoi(os.Getenv(envHelperN))
	tag := os.Getenv(envHelperTag)
	m := New(WithProjectsFile(filepath.Join(dir, "projects")), WithProjidFile(filepath.Join(dir, "projid")))
	for i := range n {
		if _, err := recordNext(m, fmt.Sprintf("/vol/%s/%d", tag, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConcurrentProcesses(t *testing.T) {
	bk := newBookkeeping(t)
	garbage := "# hand-written, keep\nnot an entry\n"
	if err := os.WriteFile(bk.projects, []byte(garbage), 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([][]byte, 2)
	for i, tag := range []string{"a", "b"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), envHelperDir+"="+bk.dir, envHelperTag+"="+tag, envHelperN+"="+strconv.Itoa(n))
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	projects, projid := bk.read(t)
	if !strings.HasPrefix(projects, garbage) {
		t.Errorf("unparsable lines were not preserved at the top:\n%s", projects)
	}
	p, q := parseProjects(projects), parseProjid(projid)
	seen := map[uint32]string{}
	for _, l := range p.lines {
		if !l.ok {
			continue
		}
		if other, dup := seen[l.id]; dup {
			t.Errorf("ID %d recorded for %s and %s: a lost update", l.id, other, l.path)
		}
		seen[l.id] = l.path
		if !q.hasID(l.id) {
			t.Errorf("ID %d has no projid entry", l.id)
		}
	}
	if len(seen) != 2*n {
		t.Errorf("%d entries after %d transactions in two processes; want every one:\n%s", len(seen), 2*n, projects)
	}
	for id := FirstProjectID; id < FirstProjectID+2*n; id++ {
		if _, ok := seen[id]; !ok {
			t.Errorf("ID %d missing: IDs should be dense from %d", id, FirstProjectID)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(bk.dir, ".*tmp-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	bk := newBookkeeping(t)
	m := New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid))
	var wg sync.WaitGroup
	ids := make([]uint32, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := recordNext(m, fmt.Sprintf("/vol/%d", i))
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	slices.Sort(ids)
	if len(slices.Compact(ids)) != 16 {
		t.Errorf("IDs handed out twice: %v", ids)
	}
}

func TestRefusesUnsafeFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, bk bookkeeping)
	}{
		{"projects is a symlink", func(t *testing.T, bk bookkeeping) {
			target := filepath.Join(bk.dir, "elsewhere")
			os.WriteFile(target, []byte("1:/x\n"), 0o644)
			os.Symlink(target, bk.projects)
		}},
		{"projects is a dangling symlink", func(t *testing.T, bk bookkeeping) {
			os.Symlink(filepath.Join(bk.dir, "nothing"), bk.projects)
		}},
		{"projid is a symlink", func(t *testing.T, bk bookkeeping) {
			target := filepath.Join(bk.dir, "elsewhere")
			os.WriteFile(target, nil, 0o644)
			os.Symlink(target, bk.projid)
		}},
		{"projects is a directory", func(t *testing.T, bk bookkeeping) { os.Mkdir(bk.projects, 0o755) }},
		{"projid is a directory", func(t *testing.T, bk bookkeeping) { os.Mkdir(bk.projid, 0o755) }},
		{"projects is a FIFO", func(t *testing.T, bk bookkeeping) {
			if err := unix.Mkfifo(bk.projects, 0o644); err != nil {
				t.Skip(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bk := newBookkeeping(t)
			tc.prepare(t, bk)
			m := New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid))
			_, err := recordNext(m, "/vol/x")
			if !errors.Is(err, ErrUnsafeFile) {
				t.Fatalf("recordNext with %s = %v; want ErrUnsafeFile", tc.name, err)
			}
			if b, err := os.ReadFile(filepath.Join(bk.dir, "elsewhere")); err == nil && strings.Contains(string(b), "/vol/x") {
				t.Errorf("wrote through the symlink: %q", b)
			}
		})
	}
}

func TestWriteAtomicRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	os.WriteFile(target, []byte("old"), 0o644)
	os.Symlink(target, link)
	if err := writeAtomic(link, []byte("new"), 0o644); !errors.Is(err, ErrUnsafeFile) {
		t.Errorf("writeAtomic(symlink) = %v; want ErrUnsafeFile", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "old" {
		t.Errorf("target changed to %q", b)
	}
}

func TestAtomicReplace(t *testing.T) {
	bk := newBookkeeping(t)
	if err := os.WriteFile(bk.projects, []byte("# keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(bk.projects)
	if err != nil {
		t.Fatal(err)
	}
	// A reader holding the old file keeps seeing the old content whole.
	old, err := os.Open(bk.projects)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	m := New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid))
	if _, err := recordNext(m, "/vol/a"); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(bk.projects)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Error("the projects file was rewritten in place; want a new inode renamed over it")
	}
	if after.Mode().Perm() != 0o600 {
		t.Errorf("mode after rewrite = %v; want the old 0600 kept", after.Mode().Perm())
	}
	if fi, err := os.Stat(bk.projid); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("new projid file: %v, %v; want mode 0644", fi, err)
	}
	b := make([]byte, 100)
	n, _ := old.Read(b)
	if string(b[:n]) != "# keep\n" {
		t.Errorf("old descriptor reads %q; want the old content", b[:n])
	}
	projects, projid := bk.read(t)
	if want := "# keep\n1048577:/vol/a\n"; projects != want {
		t.Errorf("projects = %q; want %q", projects, want)
	}
	if want := "volume1048577:1048577\n"; projid != want {
		t.Errorf("projid = %q; want %q", projid, want)
	}
}

func TestMissingDirectoryForFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	m := New(WithProjectsFile(filepath.Join(dir, "projects")), WithProjidFile(filepath.Join(dir, "projid")))
	if _, err := recordNext(m, "/vol/a"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("recordNext with the files' directory missing = %v; want ErrNotExist", err)
	}
}

// TestStaleTemporaryFilesRemoved: a writer killed between creating its
// temporary file and renaming it leaves the file behind; the next
// transaction (under the lock, so no writer is mid-write) removes it, and
// nothing else.
func TestStaleTemporaryFilesRemoved(t *testing.T) {
	bk := newBookkeeping(t)
	stale := []string{".projects.tmp-0123456789abcdef", ".projid.tmp-fedcba9876543210"}
	keep := []string{"projects.bak", ".projects.tmp-123", ".projid.tmp-0123456789abcdeg", "other.tmp-0123456789abcdef"}
	for _, name := range append(append([]string{}, stale...), keep...) {
		if err := os.WriteFile(filepath.Join(bk.dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(bk.projects, []byte("# keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(bk.projects, 0o2640); err != nil { // setgid: kept too
		t.Fatal(err)
	}
	m := New(WithProjectsFile(bk.projects), WithProjidFile(bk.projid))
	if _, err := recordNext(m, "/vol/a"); err != nil {
		t.Fatal(err)
	}
	for _, name := range stale {
		if _, err := os.Lstat(filepath.Join(bk.dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale temporary file %s: %v; want it removed", name, err)
		}
	}
	for _, name := range keep {
		if b, err := os.ReadFile(filepath.Join(bk.dir, name)); err != nil || string(b) != name {
			t.Errorf("%s = %q, %v; want it untouched", name, b, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(bk.projects, &st); err != nil || st.Mode&0o7777 != 0o2640 {
		t.Errorf("projects mode after rewrite = %#o, %v; want 02640 kept", st.Mode&0o7777, err)
	}
}
