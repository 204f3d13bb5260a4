// Package mounttest holds the helpers nodevol's tests use for real mounts:
// running a test binary in a private mount namespace, one skip rule for
// tests that need root, mounts that are undone in t.Cleanup, a tiny DSL for
// fixture trees, and byte-for-byte snapshots of sentinel trees.
package mounttest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/base/privatens"
	"github.com/nodevol/nodevol/internal/testsupport/treespec"
)

const (
	envInNS = "NODEVOL_TEST_IN_MOUNTNS" // the parent's namespace, set by privatens.Reexec
	envNoNS = "NODEVOL_TEST_NO_MOUNTNS" // why there is no private namespace
)

// Main runs the package's tests. As root on Linux it first re-executes the
// test binary in a new, private mount namespace, so every mount a test makes
// (and any a failing test forgets) vanishes with the process and never
// reaches the host. Call it from TestMain: func TestMain(m *testing.M) { mounttest.Main(m) }.
func Main(m *testing.M) {
	if os.Getenv(envInNS) == "" && os.Getenv(envNoNS) == "" {
		code, err := privatens.Reexec(envInNS, os.Args[1:], privatens.Streams{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
		if err == nil {
			os.Exit(code)
		}
		os.Setenv(envNoNS, err.Error())
	}
	os.Exit(m.Run())
}

// InPrivateNamespace reports whether this process runs in the private mount
// namespace Main set up.
func InPrivateNamespace() bool { return privatens.Child(envInNS) }

// OuterNamespace returns the file of the mount namespace the test binary
// was started in, before Main moved it into a private one: its parent's,
// /proc/PPID/ns/mnt, checked against the name Main recorded. Tests that
// must run something in the namespace `go test` was started in (the host's,
// usually) enter it through that file (nsenter --mount=FILE). It skips the
// test (fails it under CI=true) when there is no private namespace.
func OuterNamespace(t testing.TB) string {
	t.Helper()
	RequireMounts(t)
	file := fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid())
	got, err := os.Readlink(file)
	if err != nil {
		t.Fatalf("the namespace this test binary was started in: %v", err)
	}
	if want := os.Getenv(envInNS); got != want {
		t.Fatalf("%s is %s, but Main recorded %s: the parent is not the process that started this one", file, got, want)
	}
	return file
}

// HostNamespace returns OuterNamespace and the nsenter program, for tests
// that run something in the host's mount namespace. It skips the test
// when the namespace `go test` was started in is not the host's — the
// initial one (its fixed number on Linux 6.18+, or PID 1's when PID 1 is
// the init of the initial PID namespace) — and when nsenter is missing.
// The first skip is a plain one even under CI=true: a CI that runs go
// test inside a container cannot reach the host's namespace, and nothing
// on that machine could make the test run.
func HostNamespace(t testing.TB) (file, nsenter string) {
	t.Helper()
	file = OuterNamespace(t)
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		Skip(t, "nsenter (util-linux) is not installed: %v", err)
	}
	link, err := os.Readlink(file)
	if err != nil {
		t.Fatal(err)
	}
	pid1, _ := os.Readlink("/proc/1/ns/mnt")
	pid1pid, _ := os.Readlink("/proc/1/ns/pid")
	if link != "mnt:[4026531832]" && (pid1pid != "pid:[4026531836]" || pid1 != link) {
		t.Skipf("skipping: go test was started in %s, not the host's mount namespace (PID 1's: %q)", link, pid1)
	}
	return file, nsenter
}

// Skip skips the test with the reason, except under CI=true, where it
// fails it: the project's CI runs as root, in a private mount namespace,
// with its tools installed, and a guarantee the CI run never exercised
// must not pass as tested (a CI machine without mount privileges goes
// red, not green with nothing tested).
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, and this test cannot run: "+format, args...)
	}
	t.Skipf("skipping: "+format, args...)
}

// RequireMounts skips the test (fails it under CI=true, see Skip) unless
// it may mount: it must run as root, in the private mount namespace Main
// creates.
func RequireMounts(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root to mount (CAP_SYS_ADMIN); run `go test` as root to exercise real mounts")
	}
	if !InPrivateNamespace() {
		reason := os.Getenv(envNoNS)
		if reason == "" {
			reason = "the package's TestMain does not call mounttest.Main"
		}
		Skip(t, "no private mount namespace (%s); refusing to mount in the host namespace", reason)
	}
}

// RequireRoot skips the test (fails it under CI=true, see Skip) unless it
// runs as root.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root (%s)", why)
	}
}

// Build creates a fixture tree under root from lines of a tiny DSL:
//
//	"dir a/b"                 a directory (parents created)
//	"file a/b/c content..."   a file with the rest of the line as content
//	"symlink a/l /target"     a symlink
func Build(t testing.TB, root string, specs ...string) {
	t.Helper()
	if err := treespec.Build(root, specs...); err != nil {
		t.Fatalf("Build: %v", err)
	}
}

// Snapshot records every entry under root (not following symlinks, not
// crossing nothing: it reads what the path shows): type, mode, content hash
// and link target.
func Snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case d.Type().IsRegular():
			// Hashed as a stream: a test may plant a huge (sparse) file.
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			desc += " " + hex.EncodeToString(h.Sum(nil))
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("Snapshot(%q): %v", root, err)
	}
	return out
}

// Intact fails the test unless root still matches an earlier Snapshot
// exactly.
func Intact(t testing.TB, root string, want map[string]string) {
	t.Helper()
	got := Snapshot(t, root)
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("sentinel %s/%s is gone", root, k)
		} else if g != v {
			t.Errorf("sentinel %s/%s changed: %s, want %s", root, k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("sentinel tree %s gained %s", root, k)
		}
	}
}

// Sentinels creates dir with a few files and a subdirectory whose content
// the tests check byte for byte afterwards, and returns its snapshot.
func Sentinels(t testing.TB, dir string) map[string]string {
	t.Helper()
	Build(t, dir,
		"file important.txt precious data that must survive",
		"file sub/deeper.bin "+strings.Repeat("x", 4096),
		"dir sub/empty",
	)
	return Snapshot(t, dir)
}

// MemTempDir returns a new temporary directory on a memory filesystem
// (/dev/shm) when one is writable, else t.TempDir(). Tests that build large
// trees use it: creating 100,000 files on this project's CI disks takes
// tens of seconds, on tmpfs well under one.
func MemTempDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "nodevol-test-")
		if err == nil {
			t.Cleanup(func() {
				if err := os.RemoveAll(dir); err != nil {
					t.Errorf("cleanup %s: %v", dir, err)
				}
			})
			return dir
		}
	}
	return t.TempDir()
}

// RealTempDir is t.TempDir() named without symlinks: the name the mount
// table and the kernel's /proc/self/fd links give it, which tests compare
// paths against.
func RealTempDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
