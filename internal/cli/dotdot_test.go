//go:build linux

package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// dotDotFixture builds base/a/link -> base/b/c, with sentinels in both
// base/a/x (what "/a/link/../x" names as text) and base/b/x (what the
// kernel reaches through the link), an emptyDir volume of a kubelet root
// under base, and returns the path with ".." and the kubelet.
func dotDotFixture(t *testing.T) (base, path string, k *kubelet) {
	t.Helper()
	base = mounttest.RealTempDir(t)
	mounttest.Build(t, base, "dir b/c", "symlink a/link "+filepath.Join(base, "b", "c"))
	mounttest.Sentinels(t, filepath.Join(base, "a", "x"))
	mounttest.Sentinels(t, filepath.Join(base, "b", "x"))
	k = newKubelet(t, base)
	k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
	return base, filepath.Join(base, "a", "link") + "/../x", k
}

// testDotDot runs every command that takes a path with paths holding a
// ".." element, through run (in this process, or the built binary): each
// is refused with exit status 2 and a reason, and nothing under base
// changes, byte for byte.
func testDotDot(t *testing.T, run func(t *testing.T, args ...string) result) {
	base, path, k := dotDotFixture(t)
	before := mounttest.Snapshot(t, base)
	volDir := filepath.Join(k.root, "pods", testUID, "volumes", "kubernetes.io~empty-dir")
	tearPath := volDir + "/../kubernetes.io~empty-dir/cache" // cleans to the real volume
	const why = `has a ".." element: after a symlink the kernel and text cleaning disagree`

	stdout := func(r result) string { return r.stdout }
	stderr := func(r result) string { return r.stderr }
	for _, tc := range []struct {
		args  []string
		paths int                   // how many refusals
		out   func(r result) string // where the human output reports them
	}{
		{[]string{"check", path}, 1, stdout},
		{[]string{"rm", allowForeign, path}, 1, stderr},
		{[]string{"rm", allowForeign, "--workers", "4", path}, 1, stderr},
		{[]string{"rm", allowForeign, "--dry-run", path}, 1, stderr},
		{[]string{"usage", path}, 1, stderr},
		{[]string{"teardown", allowForeign, tearPath}, 1, stderr},
		{[]string{"teardown", allowForeign, "--dry-run", tearPath}, 1, stderr},
		{[]string{"scan", "--root", filepath.Join(base, "a", "link") + "/../../kubelet"}, 1, stderr},
		// ".." alone, leading, trailing: all refused alike.
		{[]string{"check", "..", "../x", base + "/a/.."}, 3, stdout},
		{[]string{"rm", allowForeign, base + "/a/x/..", base + "/a/x/../"}, 2, stderr},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(t, tc.args...)
			r.wantCode(t, ExitError)
			out := tc.out(r)
			wantContains(t, "output", out, why)
			if n := strings.Count(out, why); n != tc.paths {
				t.Errorf("%d refusals, want %d:\n%s", n, tc.paths, out)
			}
			mounttest.Intact(t, base, before)
		})
	}

	// --json: one object per path, each with the refusal as its error.
	for _, args := range [][]string{
		{"check", "--json", path},
		{"rm", allowForeign, "--json", path},
		{"rm", allowForeign, "--dry-run", "--json", path},
		{"teardown", allowForeign, "--json", tearPath},
		{"teardown", allowForeign, "--dry-run", "--json", tearPath},
		{"usage", "--json", path},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := run(t, args...)
			r.wantCode(t, ExitError)
			if n := strings.Count(r.stdout, "\n"); n != 1 {
				t.Fatalf("got %d JSON lines, want 1:\n%s", n, r.stdout)
			}
			objs := jsonLines(t, r.stdout, jsonKeysWithError(args[0])...)
			if len(objs) == 1 && !strings.Contains(fmt.Sprint(objs[0]["error"]), why) {
				t.Errorf("error = %q, want it to say %q", objs[0]["error"], why)
			}
			mounttest.Intact(t, base, before)
		})
	}
}

// jsonKeysWithError is the --json keys of a command's failed result.
func jsonKeysWithError(cmd string) []string {
	keys := map[string][]string{"check": checkKeys, "rm": rmKeys, "teardown": teardownKeys, "usage": usageKeys}[cmd]
	return withError(keys)
}

// "check" and "rm" of "/a/link/../x" once looked at different objects: the
// kernel resolved ".." after the symlink, RemoveAll cleaned it as text.
// Both now refuse it, and every other command too.
func TestDotDotRefused(t *testing.T) {
	testDotDot(t, nodevol)
}

// check examines a path cleaned, as rm acts on it: "/vol/link/" is the
// link (rm unlinks it), not the directory the kernel reaches through it.
func TestCheckTrailingSlashIsWhatRmRemoves(t *testing.T) {
	base := mounttest.RealTempDir(t)
	outside := filepath.Join(base, "outside")
	mounttest.Sentinels(t, outside)
	mounttest.Build(t, base, "symlink link "+outside)
	link := filepath.Join(base, "link") + "/"

	r := nodevol(t, "check", link)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, link+"\n  exists:        yes (symlink to "+outside+";")
	r = nodevol(t, "rm", allowForeign, "--dry-run", link)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "would remove the symlink "+link)
}

// TestDotDotRefusalSaysNothingOfRemoval: scan --root and usage remove
// nothing, so their refusal of a path with a ".." element must not speak
// of removing; it says why ".." is refused and what to do instead.
func TestDotDotRefusalSaysNothingOfRemoval(t *testing.T) {
	base := mounttest.RealTempDir(t)
	for _, args := range [][]string{
		{"scan", "--root", base + "/a/../kubelet"},
		{"usage", base + "/a/../x"},
	} {
		r := nodevol(t, args...)
		r.wantCode(t, ExitError)
		wantContains(t, "stderr", r.stderr, `has a ".." element`, `name the path without ".."`)
		if words := strings.ReplaceAll(r.stderr, base, "BASE"); strings.Contains(strings.ToLower(words), "remov") {
			t.Errorf("nodevol %s: the refusal speaks of removing, which %s never does:\n%s", strings.Join(args, " "), args[0], r.stderr)
		}
	}
}
