//go:build linux

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

var checkKeys = []string{"path", "exists", "mountPoint", "mountPointSure", "fsType", "medium", "hugePageSize", "nestedMounts", "safeToRemove", "mountNamespace"}

func TestCheckPlainDirectory(t *testing.T) {
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a.txt hello", "dir sub/deeper", "symlink out /etc")
	before := mounttest.Snapshot(t, base)

	r := nodevol(t, "check", vol)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout,
		vol+"\n",
		"exists:        yes (directory)",
		"mount point:   no (sure)",
		"medium:        Default",
		"nested mounts: none",
		"verdict:       safe to remove",
	)
	if strings.Contains(r.stdout, "hugepage") {
		t.Errorf("hugepage size printed for a plain directory:\n%s", r.stdout)
	}

	r = nodevol(t, "check", "--json", vol)
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, checkKeys...)
	if len(objs) != 1 {
		t.Fatalf("got %d JSON lines, want 1", len(objs))
	}
	o := objs[0]
	if o["path"] != vol || o["exists"] != true || o["mountPoint"] != false || o["mountPointSure"] != true ||
		o["medium"] != "Default" || o["hugePageSize"] != "" || o["safeToRemove"] != true || o["fsType"] == "" {
		t.Errorf("check --json %s = %v; want an existing, non-mount, Default, safe directory", vol, o)
	}
	if nm, _ := o["nestedMounts"].([]any); nm == nil || len(nm) != 0 {
		t.Errorf("nestedMounts = %#v, want []", o["nestedMounts"])
	}
	mounttest.Intact(t, base, before) // check changes nothing
}

func TestCheckMissingFileSymlink(t *testing.T) {
	base := mounttest.RealTempDir(t)
	mounttest.Build(t, base, "file f.txt data", "symlink link /etc", "symlink dangling /nonexistent/target")
	missing := filepath.Join(base, "missing")

	r := nodevol(t, "check", missing, filepath.Join(base, "f.txt"), filepath.Join(base, "link"), filepath.Join(base, "dangling"))
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout,
		missing+"\n  exists:        no\n  verdict:       safe: nothing to remove\n",
		"yes (file)",
		"yes (symlink to /etc; rm removes the link, never its target)",
		"yes (symlink to /nonexistent/target;",
	)
	if n := strings.Count(r.stdout, "\n\n"); n != 3 {
		t.Errorf("want 4 blocks separated by blank lines, got %d separators", n)
	}

	r = nodevol(t, "check", "--json", missing, filepath.Join(base, "link"))
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, checkKeys...)
	if len(objs) != 2 {
		t.Fatalf("got %d JSON lines, want 2", len(objs))
	}
	if o := objs[0]; o["exists"] != false || o["safeToRemove"] != true || o["mountPoint"] != false {
		t.Errorf("missing path: %v; want exists=false, safeToRemove=true", o)
	}
	// A symlink to a mount point (/etc may be one in a container) is still
	// not a mount point itself: rm unlinks it.
	if o := objs[1]; o["exists"] != true || o["mountPoint"] != false || o["mountPointSure"] != true || o["safeToRemove"] != true {
		t.Errorf("symlink: %v; want a safe non-mount-point", o)
	}
}

// The exit code is the worst over all paths: an error (2) beats unsafe (1).
func TestCheckExitCodeIsWorstOverPaths(t *testing.T) {
	base := mounttest.RealTempDir(t)
	mounttest.Build(t, base, "file f data")
	notDir := filepath.Join(base, "f", "x") // ENOTDIR: cannot be examined

	r := nodevol(t, "check", base, notDir)
	r.wantCode(t, ExitError)
	wantContains(t, "stdout", r.stdout, "verdict:       safe to remove", "error:", "not a directory", "UNSAFE: could not be examined")

	r = nodevol(t, "check", "/")
	r.wantCode(t, ExitRefused)
	wantContains(t, "stdout", r.stdout, "UNSAFE: it is itself a mount point")

	r = nodevol(t, "check", base, "/", notDir)
	r.wantCode(t, ExitError)
}

func TestCheckErrorJSON(t *testing.T) {
	base := mounttest.RealTempDir(t)
	mounttest.Build(t, base, "file f data")
	r := nodevol(t, "check", "--json", filepath.Join(base, "f", "x"))
	r.wantCode(t, ExitError)
	objs := jsonLines(t, r.stdout, withError(checkKeys)...)
	if len(objs) != 1 || !strings.Contains(fmt.Sprint(objs[0]["error"]), "not a directory") {
		t.Errorf("got %v; want one object whose error says \"not a directory\"", objs)
	}
}

func TestCheckTmpfsMountRoot(t *testing.T) {
	mounttest.RequireMounts(t)
	vol := filepath.Join(mounttest.RealTempDir(t), "memvol")
	mounttest.Tmpfs(t, vol, "size=1m")

	r := nodevol(t, "check", "--json", vol)
	r.wantCode(t, ExitRefused)
	objs := jsonLines(t, r.stdout, checkKeys...)
	if len(objs) != 1 {
		t.Fatalf("got %d JSON lines, want 1", len(objs))
	}
	o := objs[0]
	if o["mountPoint"] != true || o["mountPointSure"] != true || o["fsType"] != "tmpfs" || o["medium"] != "Memory" || o["safeToRemove"] != false {
		t.Errorf("check --json on a tmpfs root = %v; want mountPoint, sure, tmpfs, Memory, unsafe", o)
	}

	r = nodevol(t, "check", vol)
	r.wantCode(t, ExitRefused)
	wantContains(t, "stdout", r.stdout, "mount point:   yes (sure)", "filesystem:    tmpfs", "medium:        Memory",
		"UNSAFE: it is itself a mount point (tmpfs); unmount it first")
}

func TestCheckNestedMounts(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file scratch.bin scratch", "dir cache")
	mounttest.Build(t, base, "file outside/secret.txt not the pod's")
	nas := filepath.Join(vol, "cache", "nas")
	bound := filepath.Join(vol, "secret.txt")
	mounttest.Tmpfs(t, nas, "size=1m")
	mounttest.Bind(t, filepath.Join(base, "outside", "secret.txt"), bound)

	r := nodevol(t, "check", vol)
	r.wantCode(t, ExitRefused)
	wantContains(t, "stdout", r.stdout,
		"nested mounts: 2\n",
		"    "+nas+" (tmpfs from tmpfs)\n",
		"    "+bound+" (",
		"UNSAFE: 2 mounts beneath it; nodevol rm would refuse and delete nothing",
	)

	r = nodevol(t, "check", "--json", vol)
	r.wantCode(t, ExitRefused)
	objs := jsonLines(t, r.stdout, checkKeys...)
	if len(objs) != 1 {
		t.Fatalf("got %d JSON lines, want 1", len(objs))
	}
	o := objs[0]
	if o["safeToRemove"] != false || o["mountPoint"] != false {
		t.Errorf("check --json = %v; want unsafe, not itself a mount point", o)
	}
	nm, _ := o["nestedMounts"].([]any)
	if len(nm) != 2 {
		t.Fatalf("nestedMounts = %v; want 2 (the tmpfs and the bind-mounted file)", o["nestedMounts"])
	}
	// Sorted by mount point: .../cache/nas before .../secret.txt.
	for i, want := range []struct{ mountPoint, fsType string }{{nas, "tmpfs"}, {bound, ""}} {
		m, _ := nm[i].(map[string]any)
		if m["mountPoint"] != want.mountPoint || (want.fsType != "" && m["fsType"] != want.fsType) {
			t.Errorf("nestedMounts[%d] = %v; want mountPoint %s %s", i, m, want.mountPoint, want.fsType)
		}
		if len(m) != 3 || m["source"] == nil {
			t.Errorf("nestedMounts[%d] = %v; want exactly mountPoint, fsType, source", i, m)
		}
	}
}

func TestCheckHugetlbfs(t *testing.T) {
	mounttest.RequireMounts(t)
	if b, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(b), "\thugetlbfs\n") {
		mounttest.Skip(t, "this kernel has no hugetlbfs (not in /proc/filesystems)")
	}
	vol := filepath.Join(mounttest.RealTempDir(t), "hugevol")
	mounttest.Mount(t, "nodev", vol, "hugetlbfs", 0, "pagesize=2M")

	r := nodevol(t, "check", "--json", vol)
	r.wantCode(t, ExitRefused)
	objs := jsonLines(t, r.stdout, checkKeys...)
	if len(objs) != 1 {
		t.Fatalf("got %d JSON lines, want 1", len(objs))
	}
	o := objs[0]
	if o["fsType"] != "hugetlbfs" || o["medium"] != "HugePages" || o["hugePageSize"] != "2Mi" || o["mountPoint"] != true {
		t.Errorf("check --json on hugetlbfs pagesize=2M = %v; want hugetlbfs, HugePages, 2Mi, mount point", o)
	}

	r = nodevol(t, "check", vol)
	wantContains(t, "stdout", r.stdout, "medium:        HugePages", "hugepage size: 2Mi")
}

// TestCheckRefusesWhatRmRefuses: check answers as rm would for every path
// rm refuses before looking at it — a relative path, a ".." element, a
// last element "." or ".." (as GNU rm refuses "rm -rf ." with "refusing to
// remove '.' or '..' directory") — refused with exit status 2 and rm's own
// reason, never called safe to remove. Nothing is touched. ("/" is
// examined: a mount point, unsafe; TestCheckExitCodeIsWorstOverPaths.)
func TestCheckRefusesWhatRmRefuses(t *testing.T) {
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a.txt data", "file sub/b.txt data")
	t.Chdir(vol) // so that "." and "a.txt" name real entries
	before := mounttest.Snapshot(t, base)
	const dot = "refusing to remove '.' or '..' directory"
	for _, tc := range []struct{ path, reason string }{
		{".", dot},
		{"./", dot},
		{vol + "/.", dot},
		{vol + "/sub/./", dot},
		{"a.txt", "not absolute"},
		{"./sub", "not absolute"},
		{"..", dotDotReason},
		{vol + "/sub/..", dotDotReason},
	} {
		t.Run(tc.path, func(t *testing.T) {
			want := fmt.Sprintf("invalid path %q: %s", tc.path, tc.reason)
			r := nodevol(t, "check", "--", tc.path)
			r.wantCode(t, ExitError)
			wantContains(t, "stdout", r.stdout, want, "REFUSED")
			if strings.Contains(r.stdout, "safe to remove") {
				t.Errorf("check %q calls it safe to remove:\n%s", tc.path, r.stdout)
			}
			objs := jsonLines(t, nodevol(t, "check", "--json", "--", tc.path).stdout, withError(checkKeys)...)
			if len(objs) != 1 || objs[0]["safeToRemove"] != false || objs[0]["error"] != want {
				t.Errorf("check --json %q = %v; want safeToRemove false and error %q", tc.path, objs, want)
			}
			dry := nodevol(t, "rm", allowForeign, "--dry-run", "--", tc.path)
			wantContains(t, "rm --dry-run stderr", dry.stderr, want)
			mounttest.Intact(t, base, before)
		})
	}
}
