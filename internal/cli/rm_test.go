//go:build linux

package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

var rmKeys = []string{"path", "removed", "dryRun", "refused", "nestedMounts", "mountNamespace"}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists (lstat: %v)", path, err)
	}
}

// volumeWithOutsideLink builds a volume holding files, directories and a
// symlink to a sentinel directory outside it, and returns the volume and
// the sentinels' snapshot.
func volumeWithOutsideLink(t *testing.T, base string) (vol, outside string, snap map[string]string) {
	t.Helper()
	vol = filepath.Join(base, "vol")
	outside = filepath.Join(base, "outside")
	snap = mounttest.Sentinels(t, outside)
	mounttest.Build(t, vol,
		"file a.txt scratch",
		"file sub/b.txt more",
		"dir sub/empty",
		"symlink sub/nas "+outside,
		"symlink nas-file "+filepath.Join(outside, "important.txt"),
	)
	return vol, outside, snap
}

func TestRmRemovesAndNeverFollowsSymlinks(t *testing.T) {
	for _, workers := range []string{"1", "4"} {
		t.Run("workers="+workers, func(t *testing.T) {
			base := mounttest.RealTempDir(t)
			vol, outside, snap := volumeWithOutsideLink(t, base)
			// Enough entries for the parallel walk to have work to share.
			for i := range 20 {
				specs := []string{fmt.Sprintf("dir d%02d/e", i)}
				for j := range 10 {
					specs = append(specs, fmt.Sprintf("file d%02d/e/f%d x", i, j))
				}
				mounttest.Build(t, vol, specs...)
			}

			r := nodevol(t, "rm", allowForeign, "--workers", workers, vol)
			r.wantCode(t, ExitOK)
			if r.stdout != "removed "+vol+"\n" || r.stderr != "" {
				t.Errorf("stdout %q, stderr %q; want %q and nothing", r.stdout, r.stderr, "removed "+vol+"\n")
			}
			mustNotExist(t, vol)
			mounttest.Intact(t, outside, snap)
		})
	}
}

func TestRmMissingAndSymlinkPath(t *testing.T) {
	base := mounttest.RealTempDir(t)
	outside := filepath.Join(base, "outside")
	snap := mounttest.Sentinels(t, outside)
	link := filepath.Join(base, "link")
	mounttest.Build(t, base, "symlink link "+outside)
	missing := filepath.Join(base, "missing", "deeper")

	r := nodevol(t, "rm", allowForeign, missing, link)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout,
		"nothing to remove: "+missing+" does not exist\n",
		"removed the symlink "+link+" (its target was not touched)\n")
	mustNotExist(t, link)
	mounttest.Intact(t, outside, snap)
}

func TestRmRefusesNestedMounts(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, workers := range []string{"1", "4"} {
		t.Run("workers="+workers, func(t *testing.T) {
			base := mounttest.RealTempDir(t)
			vol := filepath.Join(base, "vol")
			mounttest.Build(t, vol, "file scratch.bin scratch", "dir cache/tmp", "file cache/tmp/x y")
			nas := filepath.Join(vol, "cache", "nas")
			mounttest.Tmpfs(t, nas, "size=1m")
			mounttest.Sentinels(t, nas)
			outsideFile := filepath.Join(base, "outside", "secret.txt")
			mounttest.Build(t, base, "file outside/secret.txt not the pod's")
			bound := filepath.Join(vol, "secret.txt")
			mounttest.Bind(t, outsideFile, bound)
			before := mounttest.Snapshot(t, base) // the volume, the NAS and the bound file

			r := nodevol(t, "rm", allowForeign, "--workers", workers, vol)
			r.wantCode(t, ExitRefused)
			wantContains(t, "stderr", r.stderr,
				"refused "+vol+": 2 mounts beneath it; nothing was deleted:\n",
				"  "+nas+" (tmpfs from tmpfs)\n",
				"  "+bound+" (",
				"unmount them first",
			)
			if r.stdout != "" {
				t.Errorf("stdout %q; want nothing (a refusal is reported on stderr)", r.stdout)
			}
			mounttest.Intact(t, base, before)

			r = nodevol(t, "rm", allowForeign, "--json", "--workers", workers, vol)
			r.wantCode(t, ExitRefused)
			objs := jsonLines(t, r.stdout, rmKeys...)
			if len(objs) != 1 {
				t.Fatalf("got %d JSON lines, want 1", len(objs))
			}
			o := objs[0]
			nm, _ := o["nestedMounts"].([]any)
			if o["removed"] != false || o["refused"] != true || o["dryRun"] != false || len(nm) != 2 {
				t.Errorf("rm --json = %v; want refused, not removed, 2 nested mounts", o)
			}
			mounttest.Intact(t, base, before)

			// Once the mounts are gone, the same command removes the volume.
			mounttest.Unmount(t, nas)
			mounttest.Unmount(t, bound)
			r = nodevol(t, "rm", allowForeign, "--workers", workers, vol)
			r.wantCode(t, ExitOK)
			mustNotExist(t, vol)
			if b, err := os.ReadFile(outsideFile); err != nil || string(b) != "not the pod's" {
				t.Errorf("the bind mount's source %s = %q, %v; want it untouched", outsideFile, b, err)
			}
		})
	}
}

func TestRmRefusesMountPoint(t *testing.T) {
	mounttest.RequireMounts(t)
	vol := filepath.Join(mounttest.RealTempDir(t), "memvol")
	mounttest.Tmpfs(t, vol, "size=1m")
	snap := mounttest.Sentinels(t, vol)

	for _, args := range [][]string{{"rm", allowForeign, vol, vol + "/"}, {"rm", allowForeign, "--dry-run", vol, vol + "/"}} {
		r := nodevol(t, args...)
		r.wantCode(t, ExitRefused)
		wantContains(t, "stderr", r.stderr, vol+": it is itself a mount point", "  "+vol+" (tmpfs")
		mounttest.Intact(t, vol, snap)
	}
}

func TestRmDryRunDeletesNothing(t *testing.T) {
	base := mounttest.RealTempDir(t)
	vol, _, _ := volumeWithOutsideLink(t, base)
	link := filepath.Join(vol, "nas-file")
	missing := filepath.Join(base, "missing")
	before := mounttest.Snapshot(t, base)

	r := nodevol(t, "rm", allowForeign, "--dry-run", vol, link, missing)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout,
		"would remove "+vol+"\n",
		"would remove the symlink "+link+" (its target would not be touched)\n",
		"nothing to remove: "+missing+" does not exist\n")

	// A flag after the paths still makes it a dry run.
	r = nodevol(t, "rm", allowForeign, vol, "--dry-run")
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "would remove "+vol+"\n")

	r = nodevol(t, "rm", allowForeign, "--dry-run", "--json", vol, missing)
	r.wantCode(t, ExitOK)
	objs := jsonLines(t, r.stdout, rmKeys...)
	if len(objs) != 2 {
		t.Fatalf("got %d JSON lines, want 2", len(objs))
	}
	if o := objs[0]; o["dryRun"] != true || o["removed"] != true || o["refused"] != false {
		t.Errorf("dry run of a removable volume: %v; want dryRun, removed (would be), not refused", o)
	}
	if o := objs[1]; o["dryRun"] != true || o["removed"] != false || o["refused"] != false {
		t.Errorf("dry run of a missing path: %v; want dryRun, not removed, not refused", o)
	}
	mounttest.Intact(t, base, before)
}

func TestRmDryRunWouldRefuse(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file scratch scratch")
	nas := filepath.Join(vol, "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	mounttest.Sentinels(t, nas)
	before := mounttest.Snapshot(t, base)

	r := nodevol(t, "rm", allowForeign, "--dry-run", vol)
	r.wantCode(t, ExitRefused)
	wantContains(t, "stderr", r.stderr, "would refuse "+vol+": 1 mount beneath it; nothing would be deleted:\n", "  "+nas+" (tmpfs from tmpfs)\n")

	r = nodevol(t, "rm", allowForeign, "--dry-run", "--json", vol)
	r.wantCode(t, ExitRefused)
	objs := jsonLines(t, r.stdout, rmKeys...)
	if len(objs) != 1 {
		t.Fatalf("got %d JSON lines, want 1", len(objs))
	}
	nm, _ := objs[0]["nestedMounts"].([]any)
	if objs[0]["refused"] != true || objs[0]["removed"] != false || len(nm) != 1 {
		t.Errorf("dry run with a nested tmpfs: %v; want refused with 1 mount", objs[0])
	}
	mounttest.Intact(t, base, before)
}

func TestRmRejectsBadPaths(t *testing.T) {
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a.txt data", "file sub/b.txt data")
	t.Chdir(base) // so that the relative "vol" names a real tree
	before := mounttest.Snapshot(t, base)

	for _, tc := range []struct{ name, path, reason string }{
		{"relative", "vol", "not absolute"},
		{"relative dot", "./vol", "not absolute"},
		{"root", "/", "refusing to remove the root directory"},
		{"root twice", "//", "refusing to remove the root directory"},
		{"ends in ..", vol + "/sub/..", dotDotReason},
		{"ends in ../", vol + "/sub/../", dotDotReason},
		{".. inside", vol + "/sub/../a.txt", dotDotReason},
		{"ends in .", vol + "/.", "refusing to remove '.' or '..' directory"},
		{"dot", ".", "refusing to remove '.' or '..' directory"},
		{"empty", "", "empty path"},
	} {
		for _, mode := range [][]string{{"rm", allowForeign}, {"rm", allowForeign, "--dry-run"}, {"rm", allowForeign, "--workers", "4"}} {
			t.Run(tc.name+"/"+strings.Join(mode, " "), func(t *testing.T) {
				r := nodevol(t, append(mode, "--", tc.path)...)
				r.wantCode(t, ExitError)
				wantContains(t, "stderr", r.stderr, fmt.Sprintf("nodevol rm: invalid path %q: %s; nothing was touched", tc.path, tc.reason))
				if r.stdout != "" {
					t.Errorf("stdout %q, want nothing", r.stdout)
				}
				mounttest.Intact(t, base, before)

				r = nodevol(t, append(mode, "--json", "--", tc.path)...)
				r.wantCode(t, ExitError)
				objs := jsonLines(t, r.stdout, withError(rmKeys)...)
				if len(objs) != 1 || objs[0]["removed"] != false || objs[0]["refused"] != false || !strings.Contains(fmt.Sprint(objs[0]["error"]), tc.reason) {
					t.Errorf("rm --json %q = %v; want one object with error %q", tc.path, objs, tc.reason)
				}
				mounttest.Intact(t, base, before)
			})
		}
	}
}

// An invalid path does not stop the other paths, and the exit code is the
// worst of them.
func TestRmMixedPaths(t *testing.T) {
	base := mounttest.RealTempDir(t)
	vol := filepath.Join(base, "vol")
	mounttest.Build(t, vol, "file a.txt data")
	r := nodevol(t, "rm", allowForeign, "--json", "relative", vol)
	r.wantCode(t, ExitError)
	if n := strings.Count(r.stdout, "\n"); n != 2 {
		t.Errorf("got %d JSON lines, want 2:\n%s", n, r.stdout)
	}
	wantContains(t, "stdout", r.stdout, `"path":"`+vol+`","removed":true,"dryRun":false,"refused":false,"nestedMounts":[],"mountNamespace":{`)
	mustNotExist(t, vol)
}

// Several entries that cannot be removed: the human output has one line
// per failure RemoveAll reports, and --json "errors" the same messages.
func TestRmReportsEveryError(t *testing.T) {
	mounttest.RequireMounts(t) // CAP_LINUX_IMMUTABLE, and a tmpfs that supports the flag
	base := mounttest.RealTempDir(t)
	mounttest.Tmpfs(t, base, "size=1m")
	vol := filepath.Join(base, "vol")
	for i := range 3 {
		p := filepath.Join(vol, fmt.Sprintf("d%d", i), "locked")
		mounttest.Build(t, vol, fmt.Sprintf("file d%d/locked x", i), fmt.Sprintf("file d%d/free x", i))
		mounttest.SetImmutable(t, p, true)
		t.Cleanup(func() { mounttest.SetImmutable(t, p, false) })
	}
	// The first run removes what it can; the next two meet the same tree.
	nodevol(t, "rm", allowForeign, vol).wantCode(t, ExitError)
	r := nodevol(t, "rm", allowForeign, "--json", vol)
	r.wantCode(t, ExitError)
	objs := jsonLines(t, r.stdout, withError(rmKeys)...)
	if len(objs) != 1 {
		t.Fatalf("got %d JSON lines, want 1", len(objs))
	}
	// RemoveAll either lists the three failures or (before it listed every
	// one) names the first and counts the others; the CLI reports what it
	// gets, each failure on its own.
	errs, _ := objs[0]["errors"].([]any)
	switch {
	case len(errs) == 3:
		for i, e := range errs {
			if p := filepath.Join(vol, fmt.Sprintf("d%d", i), "locked"); !strings.Contains(fmt.Sprint(e), p) {
				t.Errorf("errors[%d] = %q, want it to name %s", i, e, p)
			}
		}
	case len(errs) == 1 && strings.HasSuffix(fmt.Sprint(errs[0]), "(and 2 more errors)"):
	default:
		t.Fatalf("errors = %q, want the three immutable files", objs[0]["errors"])
	}
	r = nodevol(t, "rm", allowForeign, vol)
	r.wantCode(t, ExitError)
	wantErrorLines(t, r.stderr, errs)
	for i := range 3 {
		if _, err := os.Lstat(filepath.Join(vol, fmt.Sprintf("d%d", i), "locked")); err != nil {
			t.Errorf("immutable file: %v", err)
		}
	}
}

// wantErrorLines checks that stderr is one "nodevol rm: " line per element
// of the --json output's errors, in order: the human output drops none.
func wantErrorLines(t *testing.T, stderr string, errs []any) {
	t.Helper()
	var want strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&want, "nodevol rm: %s\n", e)
	}
	if stderr != want.String() {
		t.Errorf("stderr:\n%s\nwant one line per element of --json errors:\n%s", stderr, want.String())
	}
}
