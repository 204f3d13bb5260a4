//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// testTeardownCLI runs "nodevol teardown" end to end; TestCLI calls it
// with the binary it built.
func testTeardownCLI(t *testing.T, bin binary) {
	t.Run("Default volume, then again", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		outside := filepath.Join(base, "outside")
		snap := mounttest.Sentinels(t, outside)
		mounttest.Build(t, vol, "file index.db scratch", "file tmp/chunk x", "symlink nas "+outside)
		ready := k.ready(t, testUID, "cache")
		if _, err := os.Stat(ready); err != nil {
			t.Fatalf("SetUp wrote no ready marker: %v", err)
		}

		r := bin.run(t, nil, "teardown", allowForeign, vol)
		r.wantCode(t, ExitOK)
		if !strings.HasPrefix(r.stdout, "removed "+vol+" (a Default-medium volume on ") || r.stderr != "" {
			t.Errorf("stdout %q, stderr %q; want %q... and nothing", r.stdout, r.stderr, "removed "+vol)
		}
		mustNotExist(t, vol)
		mustNotExist(t, filepath.Dir(ready))
		mounttest.Intact(t, outside, snap)

		// Idempotent: nothing there is success, and says so.
		r = bin.run(t, nil, "teardown", allowForeign, vol)
		r.wantCode(t, ExitOK)
		if want := "nothing to tear down: " + vol + " does not exist\n"; r.stdout != want {
			t.Errorf("second teardown: stdout %q, want %q", r.stdout, want)
		}
		r = bin.run(t, nil, "teardown", allowForeign, "--json", vol)
		r.wantCode(t, ExitOK)
		objs := jsonLines(t, r.stdout, teardownKeys...)
		if len(objs) != 1 {
			t.Fatalf("got %d JSON lines, want 1", len(objs))
		}
		o := objs[0]
		if o["path"] != vol || o["podUID"] != testUID || o["volume"] != "cache" || o["action"] != "nothing" ||
			o["done"] != true || o["refused"] != false || o["dryRun"] != false {
			t.Errorf("teardown --json of a missing volume = %v; want action nothing, done", o)
		}
	})

	// A trailing slash is accepted, as rm accepts it: the volume directory
	// itself, never followed through a symlink.
	t.Run("trailing slash", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		mounttest.Build(t, vol, "file index.db scratch")
		r := bin.run(t, nil, "teardown", allowForeign, "--dry-run", vol+"/")
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "would remove "+vol+"/ (a Default-medium volume on ")
		r = bin.run(t, nil, "teardown", allowForeign, "--json", vol+"//")
		r.wantCode(t, ExitOK)
		if objs := jsonLines(t, r.stdout, teardownKeys...); len(objs) != 1 || objs[0]["path"] != vol+"//" || objs[0]["action"] != "remove" || objs[0]["done"] != true {
			t.Errorf("teardown --json %s// = %v; want it removed, reported as given", vol, objs)
		}
		mustNotExist(t, vol)

		// A volume directory that is a symlink: "vol/" names the link, as
		// in rm, and what it points to is never touched.
		outside := filepath.Join(base, "outside")
		snap := mounttest.Sentinels(t, outside)
		link := k.setUp(t, testUID, "linked", volume.EmptyDirSource{})
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		bin.run(t, nil, "teardown", allowForeign, link+"/")
		mounttest.Intact(t, outside, snap)
	})

	t.Run("leftover metadata only", func(t *testing.T) {
		k := newKubelet(t, mounttest.RealTempDir(t))
		vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		if err := os.Remove(vol); err != nil {
			t.Fatal(err)
		}
		r := bin.run(t, nil, "teardown", allowForeign, "--dry-run", vol)
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "nothing to tear down: "+vol+" does not exist; its leftover metadata would be removed\n")
		r = bin.run(t, nil, "teardown", allowForeign, vol)
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "does not exist; its leftover metadata was removed\n")
		mustNotExist(t, filepath.Dir(k.ready(t, testUID, "cache")))
	})

	t.Run("dry run changes nothing", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		mounttest.Build(t, vol, "file index.db scratch")
		before := mounttest.Snapshot(t, base)

		r := bin.run(t, nil, "teardown", allowForeign, vol, "--dry-run") // a flag after the path is still a flag
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "would remove "+vol+" (a Default-medium volume on ")
		r = bin.run(t, nil, "teardown", allowForeign, "--dry-run", "--json", vol)
		r.wantCode(t, ExitOK)
		objs := jsonLines(t, r.stdout, teardownKeys...)
		if len(objs) != 1 || objs[0]["action"] != "remove" || objs[0]["medium"] != "Default" ||
			objs[0]["dryRun"] != true || objs[0]["done"] != false || objs[0]["refused"] != false {
			t.Errorf("teardown --dry-run --json = %v; want action remove, medium Default, dryRun, not done", objs)
		}
		mounttest.Intact(t, base, before)
	})

	t.Run("not an emptyDir volume directory", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		csi := k.dir(t, testUID, "kubernetes.io/csi", "pvc-1")
		mounttest.Build(t, csi, "file data x")
		emptyDir := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		before := mounttest.Snapshot(t, base)
		for _, tc := range []struct{ path, stderr string }{
			{csi, csi + " is a kubernetes.io/csi volume, not an emptyDir (kubernetes.io/empty-dir): nodevol teardown only tears down emptyDir volumes"},
			{"relative/pods/" + testUID + "/volumes/kubernetes.io~empty-dir/cache", "not absolute"},
			// As rm refuses it.
			{emptyDir + "/.", `invalid path "` + emptyDir + `/.": refusing to remove '.' or '..' directory`},
			// Unclean: the error says what is unclean.
			{strings.Replace(emptyDir, "/pods/", "//pods/", 1), `is not clean: has a doubled '/'`},
			{strings.Replace(emptyDir, "/pods/", "/pods/./", 1), `is not clean: contains a '.' element`},
			{filepath.Join(base, "kubelet", "pods", testUID), "does not end in pods/<uid>/volumes/<plugin>/<volume>"},
			{filepath.Join(k.root, "pods", testUID, "volumes", "bad~plugin~x", "v"), "not a pod volume path"},
			{"", `invalid path "": empty path`},
		} {
			r := bin.run(t, nil, "teardown", allowForeign, tc.path)
			r.wantCode(t, ExitError)
			wantContains(t, "stderr", r.stderr, "nodevol teardown: ", tc.stderr)
			if r.stdout != "" {
				t.Errorf("teardown %q: stdout %q, want nothing", tc.path, r.stdout)
			}
		}
		r := bin.run(t, nil, "teardown", allowForeign, "--json", csi)
		r.wantCode(t, ExitError)
		objs := jsonLines(t, r.stdout, withError(teardownKeys)...)
		if len(objs) != 1 || objs[0]["podUID"] != testUID || objs[0]["volume"] != "pvc-1" || objs[0]["done"] != false {
			t.Errorf("teardown --json of a csi volume = %v; want its pod UID and volume, not done, an error", objs)
		}
		mounttest.Intact(t, base, before)
	})

	t.Run("refused with a NAS inside, then torn down", func(t *testing.T) {
		mounttest.RequireMounts(t)
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		mounttest.Build(t, vol, "file index.db scratch")
		nas := filepath.Join(vol, "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		mounttest.Sentinels(t, nas)
		before := mounttest.Snapshot(t, base) // volume, NAS, ready marker, metadata

		r := bin.run(t, nil, "teardown", allowForeign, vol)
		r.wantCode(t, ExitRefused)
		wantContains(t, "stderr", r.stderr,
			"refused "+vol+": 1 mount beneath the volume",
			"nothing was changed (the ready marker and metadata are kept):\n  "+nas+" (tmpfs from tmpfs)\n")
		if r.stdout != "" {
			t.Errorf("stdout %q; want nothing (a refusal is reported on stderr)", r.stdout)
		}
		mounttest.Intact(t, base, before)
		if _, err := os.Stat(k.ready(t, testUID, "cache")); err != nil {
			t.Errorf("a refused teardown removed the ready marker: %v", err)
		}

		r = bin.run(t, nil, "teardown", allowForeign, "--json", vol)
		r.wantCode(t, ExitRefused)
		objs := jsonLines(t, r.stdout, teardownKeys...)
		if len(objs) != 1 {
			t.Fatalf("got %d JSON lines, want 1", len(objs))
		}
		o := objs[0]
		mounts, _ := o["mounts"].([]any)
		if o["action"] != "refuse" || o["refused"] != true || o["done"] != false || len(mounts) != 1 ||
			mounts[0].(map[string]any)["mountPoint"] != nas || mounts[0].(map[string]any)["fsType"] != "tmpfs" {
			t.Errorf("teardown --json = %v; want refused with the NAS listed", o)
		}
		r = bin.run(t, nil, "teardown", allowForeign, "--dry-run", vol)
		r.wantCode(t, ExitRefused)
		wantContains(t, "stderr", r.stderr, "would refuse "+vol+": ", "nothing would change:\n  "+nas+" (tmpfs from tmpfs)\n")
		mounttest.Intact(t, base, before)

		// A refusal and an error: the error's exit code wins.
		r = bin.run(t, nil, "teardown", allowForeign, vol, "relative")
		r.wantCode(t, ExitError)
		mounttest.Intact(t, base, before)

		mounttest.Unmount(t, nas)
		r = bin.run(t, nil, "teardown", allowForeign, vol)
		r.wantCode(t, ExitOK)
		mustNotExist(t, vol)
		mustNotExist(t, k.ready(t, testUID, "cache"))
	})

	t.Run("Memory and HugePages volumes are unmounted and removed", func(t *testing.T) {
		mounttest.RequireMounts(t)
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		vols := []string{k.setUp(t, testUID, "scratch", volume.EmptyDirSource{Medium: volume.StorageMediumMemory, SizeLimit: 16 << 20})}
		want := []string{"unmounted and removed " + vols[0] + " (Memory medium: tmpfs)\n"}
		if _, err := os.Stat(hugePages2Mi); err == nil {
			vols = append(vols, k.setUp(t, testUID, "huge", volume.EmptyDirSource{Medium: "HugePages-2Mi"}))
			want = append(want, "unmounted and removed "+vols[1]+" (HugePages medium: hugetlbfs, pagesize 2Mi)\n")
		}
		for _, v := range vols {
			if mounted, err := mountinfo.Mounted(v); err != nil || !mounted {
				t.Fatalf("SetUp left %s unmounted (%v)", v, err)
			}
		}
		r := bin.run(t, nil, append([]string{"teardown", allowForeign, "--dry-run"}, vols...)...)
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "would unmount and remove "+vols[0]+" (Memory medium: tmpfs)\n")

		r = bin.run(t, nil, append([]string{"teardown", allowForeign}, vols...)...)
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, want...)
		for _, v := range vols {
			mustNotExist(t, v)
			mustNotExist(t, k.ready(t, testUID, filepath.Base(v)))
		}
		if left, err := mountPointsUnder(base); err != nil || len(left) > 0 {
			t.Errorf("mounts left under %s after teardown: %q (%v)", base, left, err)
		}
	})

	t.Run("Memory volume JSON", func(t *testing.T) {
		mounttest.RequireMounts(t)
		k := newKubelet(t, mounttest.RealTempDir(t))
		vol := k.setUp(t, testUID, "scratch", volume.EmptyDirSource{Medium: volume.StorageMediumMemory})
		r := bin.run(t, nil, "teardown", allowForeign, "--json", vol)
		r.wantCode(t, ExitOK)
		objs := jsonLines(t, r.stdout, teardownKeys...)
		if len(objs) != 1 || objs[0]["medium"] != "Memory" || objs[0]["action"] != emptydir.ActionUnmountAndRemove.String() || objs[0]["done"] != true {
			t.Errorf("teardown --json = %v; want medium Memory, action unmount-and-remove, done", objs)
		}
		mustNotExist(t, vol)
	})
}

// TestTeardownCleansSubpathsFirst: a container's subPath bind mount of a
// directory inside the volume is unmounted before the volume is removed,
// as the volume manager's unmount operation does.
func TestTeardownCleansSubpathsFirst(t *testing.T) {
	mounttest.RequireMounts(t)
	k := newKubelet(t, mounttest.RealTempDir(t))
	vol := k.setUp(t, "uid-1", "cache", volume.EmptyDirSource{})
	mounttest.Build(t, vol, "file sub/f x")
	sp, _ := k.layout.SubpathDir("uid-1", "cache", "app", 0)
	mounttest.Bind(t, filepath.Join(vol, "sub"), sp)
	r := nodevol(t, "teardown", allowForeign, vol)
	r.wantCode(t, ExitOK)
	if _, err := os.Lstat(sp); !os.IsNotExist(err) {
		t.Errorf("subpath mount %s not cleaned: %v", sp, err)
	}
	if _, err := os.Lstat(vol); !os.IsNotExist(err) {
		t.Errorf("volume not torn down: %v", err)
	}
}

// TestRefusedTeardownKeepsSubpaths: with an active
// subPath bind and a NAS beneath the volume, teardown refuses before it
// changes anything — the subPath bind stays mounted — and the dry run
// says the subPath bind would be unmounted first.
func TestRefusedTeardownKeepsSubpaths(t *testing.T) {
	mounttest.RequireMounts(t)
	base := mounttest.RealTempDir(t)
	k := newKubelet(t, base)
	vol := k.setUp(t, "uid-1", "cache", volume.EmptyDirSource{})
	mounttest.Build(t, vol, "file sub/f x")
	sp, _ := k.layout.SubpathDir("uid-1", "cache", "app", 0)
	mounttest.Bind(t, filepath.Join(vol, "sub"), sp)

	r := nodevol(t, "teardown", allowForeign, "--dry-run", vol)
	r.wantCode(t, ExitOK)
	wantContains(t, "stdout", r.stdout, "would unmount 1 subPath bind mount of its containers first\n", "would remove "+vol)
	r = nodevol(t, "teardown", allowForeign, "--dry-run", "--json", vol)
	objs := jsonLines(t, r.stdout, teardownKeys...)
	if subs, _ := objs[0]["subpaths"].([]any); len(subs) != 1 {
		t.Errorf("--json subpaths = %v; want the one entry", objs[0]["subpaths"])
	}

	nas := filepath.Join(vol, "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	want := mounttest.Sentinels(t, nas)
	before := mounttest.Snapshot(t, base)
	for _, args := range [][]string{{"teardown", allowForeign, "--dry-run", vol}, {"teardown", allowForeign, vol}} {
		r := nodevol(t, args...)
		r.wantCode(t, ExitRefused)
		wantContains(t, "stderr", r.stderr, nas)
	}
	if !mounttest.IsMountRoot(t, sp) {
		t.Error("the subPath bind was unmounted by a refused teardown")
	}
	mounttest.Intact(t, nas, want)
	mounttest.Intact(t, base, before)

	// A foreign mount in the subPath tree is refused too, changing nothing.
	mounttest.Unmount(t, nas)
	foreign := filepath.Join(filepath.Dir(sp), "1")
	mounttest.Tmpfs(t, foreign, "size=1m")
	fwant := mounttest.Sentinels(t, foreign)
	before = mounttest.Snapshot(t, base)
	r = nodevol(t, "teardown", allowForeign, vol)
	r.wantCode(t, ExitRefused)
	wantContains(t, "stderr", r.stderr, foreign, "not one of the volume's own subPath binds")
	mounttest.Intact(t, foreign, fwant)
	mounttest.Intact(t, base, before)
	if !mounttest.IsMountRoot(t, sp) || !mounttest.IsMountRoot(t, foreign) {
		t.Error("a refused teardown unmounted a subPath entry")
	}
}
