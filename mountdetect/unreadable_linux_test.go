package mountdetect

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

const envNobodyScenario = "NODEVOL_TEST_NOBODY_SCENARIO"

// asNobody runs scenario(work) as the current user when that is not root,
// and otherwise in a copy of this test binary running as uid and gid 65534
// (root ignores the permissions these scenarios are about): there the
// helper test TestNobodyScenarioHelper calls scenario by name. work is a
// directory nobody may write; setup, when not nil, runs first as the
// current user.
func asNobody(t *testing.T, name string, setup func(work string)) {
	t.Helper()
	scenario := nobodyScenarios[name]
	if os.Geteuid() != 0 {
		work := t.TempDir()
		if setup != nil {
			setup(work)
		}
		scenario(t, work)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyExe := filepath.Join(dir, "mountdetect.test")
	copyFile(t, exe, copyExe)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(work)
	}
	cmd := exec.Command(copyExe, "-test.run=^TestNobodyScenarioHelper$", "-test.v")
	cmd.Env = append(os.Environ(), envNobodyScenario+"="+name+":"+work, "NODEVOL_TEST_NO_MOUNTNS=running as nobody")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scenario %s as nobody failed: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestNobodyScenarioHelper") {
		t.Fatalf("scenario %s as nobody did not run:\n%s", name, out)
	}
}

var nobodyScenarios = map[string]func(t *testing.T, work string){
	"permission":           permissionScenario,
	"unreadable":           unreadableScenario,
	"unreadableMountPoint": unreadableMountPointScenario,
}

// TestNobodyScenarioHelper is the unprivileged half of the tests that use
// asNobody; it does nothing unless one of them starts it.
func TestNobodyScenarioHelper(t *testing.T) {
	name, work, ok := strings.Cut(os.Getenv(envNobodyScenario), ":")
	if !ok {
		t.Skip("helper process for the tests that run a scenario as nobody")
	}
	if os.Geteuid() == 0 {
		t.Fatal("helper must not run as root")
	}
	nobodyScenarios[name](t, work)
}

// TestRemoveAllUnreadableDir: a caller without root removes an empty
// directory it may not list (mode 000, 0300), as os.RemoveAll does (Go's
// TestRemoveReadOnlyDir, TestRemoveUnreadableDir); a non-empty one is
// kept, reported as one *os.PathError with EACCES naming it, returned as
// itself (not inside errors.Join), and nothing in it is lost.
func TestRemoveAllUnreadableDir(t *testing.T) {
	asNobody(t, "unreadable", nil)
}

func unreadableScenario(t *testing.T, work string) {
	for _, v := range variants(t) {
		base, err := os.MkdirTemp(work, "unreadable")
		if err != nil {
			t.Fatal(err)
		}
		vol := filepath.Join(base, "vol")
		mounttest.Build(t, vol, "dir empty000", "dir empty300", "dir d/e/f300", "file d/g g", "file full000/keep precious", "file top t")
		modes := map[string]os.FileMode{"empty000": 0, "empty300": 0o300, "d/e/f300": 0o300, "full000": 0}
		for p, m := range modes {
			if err := os.Chmod(filepath.Join(vol, p), m); err != nil {
				t.Fatal(err)
			}
		}
		full := filepath.Join(vol, "full000")
		err = RemoveAll(vol, v.opts()...)
		pe, ok := err.(*os.PathError)
		if !ok || pe.Path != full || !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: RemoveAll = %#v (%v); want exactly one *os.PathError, EACCES, naming %s", v, err, err, full)
		}
		os.Chmod(full, 0o755)
		if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || string(b) != "precious" {
			t.Errorf("%s: %s/keep = %q, %v; want intact", v, full, b, err)
		}
		for _, p := range []string{"empty000", "empty300", "d", "top"} {
			mustNotExist(t, filepath.Join(vol, p))
		}

		// The start directory itself: removed when empty, refused with
		// its own EACCES when not.
		for _, m := range []os.FileMode{0, 0o300} {
			start := filepath.Join(base, "start")
			mounttest.Build(t, start, "file keep k")
			os.Chmod(start, m)
			err := RemoveAll(start, v.opts()...)
			pe, ok := err.(*os.PathError)
			if !ok || pe.Path != start || !errors.Is(err, fs.ErrPermission) {
				t.Errorf("%s: RemoveAll(non-empty %o start) = %v; want one *os.PathError, EACCES, naming it", v, m, err)
			}
			os.Chmod(start, 0o755)
			if _, err := os.Stat(filepath.Join(start, "keep")); err != nil {
				t.Errorf("%s: unreadable start directory lost data: %v", v, err)
			}
			os.Remove(filepath.Join(start, "keep"))
			os.Chmod(start, m)
			if err := RemoveAll(start, v.opts()...); err != nil {
				t.Errorf("%s: RemoveAll(empty %o start) = %v; want nil", v, m, err)
			}
			mustNotExist(t, start)
		}
		os.RemoveAll(base)
	}
}

// TestRemoveAllUnreadableMountPoint: an unreadable empty directory that is
// a mount point (a tmpfs mounted with mode 000) is not removed, by the
// start or during the walk: it is reported as a mount and left mounted.
func TestRemoveAllUnreadableMountPoint(t *testing.T) {
	mounttest.RequireMounts(t)
	asNobody(t, "unreadableMountPoint", func(work string) {
		mounttest.Build(t, work, "dir vol/m", "dir start", "file vol/f f")
		mounttest.Tmpfs(t, filepath.Join(work, "vol/m"), "mode=000")
		mounttest.Tmpfs(t, filepath.Join(work, "start"), "mode=000")
		if err := os.Chown(filepath.Join(work, "vol"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	})
}

func unreadableMountPointScenario(t *testing.T, work string) {
	for _, v := range variants(t) {
		for _, p := range []string{"vol", "start"} {
			err := RemoveAll(filepath.Join(work, p), v.opts()...)
			var cm *CrossesMountError
			if !errors.As(err, &cm) {
				t.Errorf("%s: RemoveAll(%s) = %v; want a *CrossesMountError", v, p, err)
			}
		}
		for _, p := range []string{"vol/m", "start"} {
			if !mounttest.IsMountRoot(t, filepath.Join(work, p)) {
				t.Errorf("%s: %s is no longer mounted", v, p)
			}
		}
	}
}
