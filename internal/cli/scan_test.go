//go:build linux

package cli

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// testScanCLI runs "nodevol scan" end to end; TestCLI calls it with the
// binary it built.
func testScanCLI(t *testing.T, bin binary) {
	t.Run("pods, plugins, problems and leftovers", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		cache := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		mounttest.Build(t, cache, "file index.db x")
		csi := k.dir(t, testUID2, "kubernetes.io/csi", "pvc-0a1b.data") // PV names may have dots
		secret := k.dir(t, testUID2, "kubernetes.io/secret", "token")
		mounttest.Build(t, csi, "file data x")
		mounttest.Build(t, secret, "file token x")
		pods := filepath.Join(k.root, "pods")
		badPlugin := filepath.Join(pods, testUID2, "volumes", "bad~plugin~x")
		longUID := filepath.Join(pods, strings.Repeat("u", volume.MaxPodUIDLen+1))
		notDir := filepath.Join(pods, "not-a-pod")
		leftover := filepath.Join(pods, "0dd0dd00-0000-4000-8000-000000000000")
		emptyVolumes := filepath.Join(pods, "0dd0dd00-0000-4000-8000-000000000001")
		mounttest.Build(t, pods,
			"dir "+filepath.Base(longUID)+"/volumes",
			"dir "+strings.TrimPrefix(badPlugin, pods+"/")+"/v",
			"file not-a-pod x",
			"dir "+filepath.Base(leftover)+"/plugins",
			"dir "+filepath.Base(emptyVolumes)+"/volumes",
		)
		before := mounttest.Snapshot(t, base)

		r := bin.run(t, nil, "scan", "--root", k.root)
		r.wantCode(t, ExitRefused) // problems make it at least 1
		wantContains(t, "stdout", r.stdout,
			"\nProblems (",
			"  "+badPlugin+"\n    invalid plugin directory",
			"  "+longUID+"\n    ",
			"  "+notDir+"\n    not a directory",
			"\nLeftovers (pod directories without any volume directory):\n",
			"  "+leftover+"\n",
			"  "+emptyVolumes+"\n",
			"\n"+k.root+": 3 volumes (3 ok, 0 in-use, 0 danger, 0 unknown, 0 error), 3 problems, 2 leftovers\n",
		)
		wantRow(t, r.stdout, "POD UID", "PLUGIN", "VOLUME", "MEDIUM", "MOUNT POINT", "NESTED", "VERDICT")
		wantRow(t, r.stdout, testUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "0", "ok")
		wantRow(t, r.stdout, testUID2, "kubernetes.io/csi", "pvc-0a1b.data", "Default", "no", "0", "ok")
		wantRow(t, r.stdout, testUID2, "kubernetes.io/secret", "token", "Default", "no", "0", "ok")
		if strings.Contains(r.stdout, "Danger, unknown and error") || r.stderr != scanNamespaceLine(t, k.root) {
			t.Errorf("no volume is in danger and nothing failed; stdout:\n%s\nstderr %q, want %q", r.stdout, r.stderr, scanNamespaceLine(t, k.root))
		}

		r = bin.run(t, nil, "scan", "--json", "--root", k.root)
		r.wantCode(t, ExitRefused)
		vols, problems, leftovers := scanLines(t, r.stdout)
		if len(vols) != 3 || len(problems) != 3 || len(leftovers) != 2 {
			t.Fatalf("got %d volumes, %d problems, %d leftovers; want 3, 3, 2", len(vols), len(problems), len(leftovers))
		}
		v := byVolume(vols)
		for name, want := range map[string]map[string]any{
			"cache":         {"podUID": testUID, "plugin": "kubernetes.io/empty-dir", "path": cache, "medium": "Default", "mountPoint": false, "verdict": "ok", "reasonCode": "not-mounted", "safeToRemove": true},
			"pvc-0a1b.data": {"podUID": testUID2, "plugin": "kubernetes.io/csi", "path": csi, "medium": "Default", "mountPoint": false, "verdict": "ok", "reasonCode": "not-mounted", "safeToRemove": true},
			"token":         {"podUID": testUID2, "plugin": "kubernetes.io/secret", "path": secret, "verdict": "ok", "reasonCode": "not-mounted", "safeToRemove": true},
		} {
			for key, w := range want {
				if v[name][key] != w {
					t.Errorf("volume %s: %s = %v, want %v", name, key, v[name][key], w)
				}
			}
		}
		if leftovers[0]["leftover"] != leftover || leftovers[1]["leftover"] != emptyVolumes {
			t.Errorf("leftovers %v, want %s and %s", leftovers, leftover, emptyVolumes)
		}
		var problemPaths []string
		for _, p := range problems {
			problemPaths = append(problemPaths, p["problem"].(string))
			if p["error"] == "" {
				t.Errorf("problem %v has no error", p)
			}
		}
		wantContains(t, "problems", strings.Join(problemPaths, "\n"), badPlugin, longUID, notDir)
		mounttest.Intact(t, base, before) // scan changes nothing
	})

	t.Run("all ok", func(t *testing.T) {
		k := newKubelet(t, mounttest.RealTempDir(t))
		k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		r := bin.run(t, nil, "scan", "--root", k.root)
		r.wantCode(t, ExitOK)
		wantContains(t, "stdout", r.stdout, "  ok\n", k.root+": 1 volume (1 ok, 0 in-use, 0 danger, 0 unknown, 0 error), 0 problems, 0 leftovers\n")
	})

	t.Run("unreadable entry is an error", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		volumes := filepath.Join(k.root, "pods", testUID2, "volumes")
		mounttest.Build(t, volumes, "dir kubernetes.io~csi/pvc-1")
		// Readable by nobody (root reads anything, so the scan runs as
		// nobody when the test runs as root), except the second pod's
		// volumes directory.
		for d := base; d != "/"; d = filepath.Dir(d) {
			if strings.HasPrefix(d, os.TempDir()+"/") {
				os.Chmod(d, 0o755)
			}
		}
		// SetUp makes the kubelet's directories 0750, as the kubelet does.
		filepath.WalkDir(k.root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.Chmod(volumes, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(volumes, 0o755) })
		var asNobody func(*exec.Cmd)
		if os.Geteuid() == 0 {
			asNobody = func(c *exec.Cmd) {
				c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
		}
		r := bin.run(t, asNobody, "scan", "--root", k.root)
		r.wantCode(t, ExitError)
		wantContains(t, "stdout", r.stdout, "  "+volumes+"\n    openat "+volumes+": permission denied\n", ", 1 problem, 0 leftovers\n")
	})

	t.Run("symlinked root", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, filepath.Join(base, "data"))
		cache := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		link := filepath.Join(base, "var-lib-kubelet")
		if err := os.Symlink(k.root, link); err != nil {
			t.Fatal(err)
		}
		r := bin.run(t, nil, "scan", "--json", "--root", link)
		r.wantCode(t, ExitOK)
		vols, _, _ := scanLines(t, r.stdout)
		viaLink := filepath.Join(link, strings.TrimPrefix(cache, k.root))
		if len(vols) != 1 || vols[0]["path"] != viaLink || vols[0]["safeToRemove"] != true || vols[0]["verdict"] != "ok" {
			t.Errorf("scan through %s = %v; want %s, ok and safe", link, vols, viaLink)
		}
	})

	t.Run("missing root or pods directory", func(t *testing.T) {
		base := mounttest.RealTempDir(t)
		r := bin.run(t, nil, "scan", "--root", filepath.Join(base, "nosuch"))
		r.wantCode(t, ExitError)
		wantContains(t, "stderr", r.stderr, "nodevol scan: kubelet root "+filepath.Join(base, "nosuch")+" does not exist\n")
		r = bin.run(t, nil, "scan", "--root", base)
		r.wantCode(t, ExitError)
		wantContains(t, "stderr", r.stderr, "has no pods directory")
		if r.stdout != "" {
			t.Errorf("stdout %q, want nothing", r.stdout)
		}
	})

	t.Run("subpaths", func(t *testing.T) {
		mounttest.RequireMounts(t)
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		cache := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		mounttest.Build(t, cache, "file conf/app.yaml a: b", "dir data/logs", "file hostname web-0")
		subpaths, err := k.layout.VolumeSubpathsDir(testUID, "cache")
		if err != nil {
			t.Fatal(err)
		}
		// As the kubelet does for subPath: data/logs and hostname, in
		// containers app (volumeMounts 0 and 10) and sidecar (1); the
		// third entry is left over from an earlier container start.
		logs := filepath.Join(subpaths, "app", "0")
		host := filepath.Join(subpaths, "app", "10")
		stale := filepath.Join(subpaths, "sidecar", "1")
		mounttest.Bind(t, filepath.Join(cache, "data/logs"), logs)
		mounttest.Bind(t, filepath.Join(cache, "hostname"), host)
		mounttest.Build(t, filepath.Dir(stale), "dir 1")
		other := k.setUp(t, testUID, "other", volume.EmptyDirSource{})
		before := mounttest.Snapshot(t, cache)

		r := bin.run(t, nil, "scan", "--root", k.root)
		r.wantCode(t, ExitOK) // the volume's own subpath mounts are no danger
		wantRow(t, r.stdout, testUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "0", "ok")
		wantRow(t, r.stdout, testUID, "kubernetes.io/empty-dir", "other", "Default", "no", "0", "ok")
		wantContains(t, "stdout", r.stdout,
			"\nSubpaths (containers' subPath bind mounts; the volume manager unmounts them before tearing a volume down):\n"+
				"  "+cache+"\n"+
				"    app/0      mounted      "+logs+"\n"+
				"    app/10     mounted      "+host+"\n"+
				"    sidecar/1  not mounted  "+stale+"\n\n",
			k.root+": 2 volumes (2 ok, 0 in-use, 0 danger, 0 unknown, 0 error), 0 problems, 0 leftovers\n",
		)
		if strings.Contains(r.stdout, "  "+other+"\n") {
			t.Errorf("volume other has no subpaths but is listed under Subpaths:\n%s", r.stdout)
		}

		r = bin.run(t, nil, "scan", "--json", "--root", k.root)
		r.wantCode(t, ExitOK)
		vols, _, _ := scanLines(t, r.stdout)
		v := byVolume(vols)
		want := []any{
			map[string]any{"container": "app", "index": "0", "path": logs, "mountPoint": true, "own": true},
			map[string]any{"container": "app", "index": "10", "path": host, "mountPoint": true, "own": true},
			map[string]any{"container": "sidecar", "index": "1", "path": stale, "mountPoint": false, "own": false},
		}
		if got := v["cache"]["subpaths"]; !reflect.DeepEqual(got, want) {
			t.Errorf("cache subpaths = %v; want %v", got, want)
		}
		if got, _ := v["other"]["subpaths"].([]any); got == nil || len(got) != 0 {
			t.Errorf("other subpaths = %#v; want []", v["other"]["subpaths"])
		}
		if v["cache"]["safeToRemove"] != true || v["cache"]["verdict"] != "ok" || v["cache"]["reasonCode"] != "not-mounted" {
			t.Errorf("cache safeToRemove, verdict, reasonCode = %v, %v, %v; want true, ok, not-mounted", v["cache"]["safeToRemove"], v["cache"]["verdict"], v["cache"]["reasonCode"])
		}
		wantContains(t, "cache reason", v["cache"]["reason"].(string),
			"; 2 subPath bind mounts of its containers are active: the volume manager and nodevol teardown unmount them before the teardown, so they do not make the volume unsafe")
		mounttest.Intact(t, cache, before) // scan changes nothing
	})

	t.Run("healthy node exits 0", func(t *testing.T) {
		mounttest.RequireMounts(t)
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, base)
		// What every running pod has: emptyDirs (a Default one and a
		// Memory one set up by nodevol), a secret and a projected
		// service-account token (tmpfs on their own directories, as the
		// kubelet mounts them), a CSI volume mounted by its driver on its
		// target directory <volume>/mount, and a configMap directory
		// nothing is mounted on (yet).
		scratch := k.setUp(t, testUID, "scratch", volume.EmptyDirSource{})
		mem := k.setUp(t, testUID, "mem", volume.EmptyDirSource{Medium: volume.StorageMediumMemory})
		secret := k.dir(t, testUID, "kubernetes.io/secret", "token")
		mounttest.Tmpfs(t, secret, "size=1m")
		projected := k.dir(t, testUID, "kubernetes.io/projected", "kube-api-access-x7k2p")
		mounttest.Tmpfs(t, projected, "size=1m")
		csi := k.dir(t, testUID2, "kubernetes.io/csi", "pvc-1")
		mounttest.Build(t, csi, "file vol_data.json {}", "dir mount")
		mounttest.Tmpfs(t, filepath.Join(csi, "mount"), "size=1m")
		config := k.dir(t, testUID2, "kubernetes.io/configmap", "config")
		mounttest.Build(t, config, "file app.yaml a: b")
		before := mounttest.Snapshot(t, scratch)

		r := bin.run(t, nil, "scan", "--root", k.root)
		r.wantCode(t, ExitOK)
		wantRow(t, r.stdout, testUID, "kubernetes.io/empty-dir", "scratch", "Default", "no", "0", "ok")
		wantRow(t, r.stdout, testUID, "kubernetes.io/empty-dir", "mem", "Memory", "yes (tmpfs)", "0", "in-use")
		wantRow(t, r.stdout, testUID, "kubernetes.io/secret", "token", "Memory", "yes (tmpfs)", "0", "in-use")
		wantRow(t, r.stdout, testUID, "kubernetes.io/projected", "kube-api-access-x7k2p", "Memory", "yes (tmpfs)", "0", "in-use")
		wantRow(t, r.stdout, testUID2, "kubernetes.io/csi", "pvc-1", "Memory", "yes (tmpfs)", "0", "in-use")
		wantRow(t, r.stdout, testUID2, "kubernetes.io/configmap", "config", "Default", "no", "0", "ok")
		wantContains(t, "stdout", r.stdout, k.root+": 6 volumes (2 ok, 4 in-use, 0 danger, 0 unknown, 0 error), 0 problems, 0 leftovers\n")
		if strings.Contains(r.stdout, "Danger, unknown and error") {
			t.Errorf("a healthy node lists volumes in danger:\n%s", r.stdout)
		}

		r = bin.run(t, nil, "scan", "--json", "--root", k.root)
		r.wantCode(t, ExitOK)
		vols, _, _ := scanLines(t, r.stdout)
		v := byVolume(vols)
		for name, want := range map[string][3]any{
			"scratch":               {"ok", "not-mounted", true},
			"mem":                   {"in-use", "own-mount", true}, // teardown unmounts it
			"token":                 {"in-use", "plugin-mount", false},
			"kube-api-access-x7k2p": {"in-use", "plugin-mount", false},
			"pvc-1":                 {"in-use", "plugin-mount", false},
			"config":                {"ok", "not-mounted", true},
		} {
			if got := [3]any{v[name]["verdict"], v[name]["reasonCode"], v[name]["safeToRemove"]}; got != want {
				t.Errorf("%s: verdict, reasonCode, safeToRemove = %v; want %v", name, got, want)
			}
		}
		if nested, _ := v["pvc-1"]["nestedMounts"].([]any); len(nested) != 0 || v["pvc-1"]["mountPoint"] != true {
			t.Errorf("pvc-1 = %v; want its target directory's mount as its own, no nested mounts", v["pvc-1"])
		}
		mounttest.Intact(t, scratch, before)
		if _, err := os.Stat(mem); err != nil {
			t.Error(err)
		}
	})

	t.Run("dangers", func(t *testing.T) {
		mounttest.RequireMounts(t)
		base := mounttest.RealTempDir(t)
		k := newKubelet(t, filepath.Join(base, "data"))
		// A NAS in a Default emptyDir.
		cache := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		nas := filepath.Join(cache, "nas")
		mounttest.Tmpfs(t, nas, "size=1m")
		scratch := k.setUp(t, testUID, "scratch", volume.EmptyDirSource{Medium: volume.StorageMediumMemory})
		csi := k.dir(t, testUID2, "kubernetes.io/csi", "pvc-1")
		mounttest.Tmpfs(t, csi, "size=1m")
		// A bind mount nested inside a mounted CSI volume's target
		// directory.
		csi2 := k.dir(t, testUID2, "kubernetes.io/csi", "pvc-2")
		mounttest.Build(t, csi2, "file vol_data.json {}", "dir mount")
		mounttest.Tmpfs(t, filepath.Join(csi2, "mount"), "size=1m")
		bindInCSI := filepath.Join(csi2, "mount", "data")
		shared := filepath.Join(base, "shared")
		mounttest.Build(t, shared, "file precious x")
		mounttest.Bind(t, shared, bindInCSI)
		// Not a mount point itself, but something is mounted beneath it.
		nfs := k.dir(t, testUID2, "kubernetes.io/nfs", "share")
		nfsInner := filepath.Join(nfs, "export")
		mounttest.Tmpfs(t, nfsInner, "size=1m")
		// Something no emptyDir medium mounts, on the volume directory
		// itself (an NFS share would be the same).
		foreign := k.dir(t, testUID2, "kubernetes.io/empty-dir", "foreign")
		share := filepath.Join(base, "share")
		mounttest.Build(t, share, "file data x")
		mounttest.Bind(t, share, foreign)
		// A tmpfs on an emptyDir directory that nodevol has no record of
		// mounting.
		unrecorded := k.dir(t, testUID2, "kubernetes.io/empty-dir", "unrecorded")
		mounttest.Tmpfs(t, unrecorded, "size=1m")
		// A second tmpfs stacked on a Memory emptyDir's own.
		stacked := k.setUp(t, testUID2, "stacked", volume.EmptyDirSource{Medium: volume.StorageMediumMemory})
		mounttest.Tmpfs(t, stacked, "size=1m")
		// Scanned through a symlink, as on nodes where /var/lib/kubelet
		// is one: the kernel names mounts by their resolved paths.
		link := filepath.Join(base, "var-lib-kubelet")
		if err := os.Symlink(k.root, link); err != nil {
			t.Fatal(err)
		}
		viaLink := func(p string) string { return filepath.Join(link, strings.TrimPrefix(p, k.root)) }
		before := mounttest.Snapshot(t, filepath.Join(k.root, "pods", testUID))

		r := bin.run(t, nil, "scan", "--root", link)
		r.wantCode(t, ExitRefused)
		wantRow(t, r.stdout, testUID, "kubernetes.io/empty-dir", "cache", "Default", "no", "1", "danger")
		wantRow(t, r.stdout, testUID, "kubernetes.io/empty-dir", "scratch", "Memory", "yes (tmpfs)", "0", "in-use")
		wantRow(t, r.stdout, testUID2, "kubernetes.io/csi", "pvc-1", "Memory", "yes (tmpfs)", "0", "in-use")
		wantRow(t, r.stdout, testUID2, "kubernetes.io/csi", "pvc-2", "Default", "no", "2", "danger")
		wantRow(t, r.stdout, testUID2, "kubernetes.io/nfs", "share", "Default", "no", "1", "danger")
		wantContains(t, "stdout", r.stdout,
			"\nDanger, unknown and error (reason code, reason and mounts):\n",
			"  "+viaLink(cache)+" (danger: nested-mount)\n",
			"    "+nas+" (tmpfs from tmpfs)\n",
			"  "+viaLink(csi2)+" (danger: nested-mount)\n",
			"    "+bindInCSI+" (",
			"  "+viaLink(foreign)+" (danger: foreign-mount)\n",
			"is mounted on the volume directory itself",
			"  "+viaLink(unrecorded)+" (danger: foreign-mount)\n",
			"nodevol has no record of mounting it",
			"  "+viaLink(stacked)+" (danger: stacked-mounts)\n",
			"  "+viaLink(nfs)+" (danger: nested-mount)\n    1 mount beneath it, which its plugin's teardown would cross; unmount it first\n    "+nfsInner+" (tmpfs from tmpfs)\n",
			link+": 8 volumes (0 ok, 2 in-use, 6 danger, 0 unknown, 0 error), 0 problems, 0 leftovers\n",
		)
		for _, p := range []string{scratch, csi} {
			if strings.Contains(r.stdout, "  "+viaLink(p)+" (") {
				t.Errorf("in-use volume %s is listed with the dangers:\n%s", p, r.stdout)
			}
		}

		r = bin.run(t, nil, "scan", "--json", "--root", link)
		r.wantCode(t, ExitRefused)
		vols, _, _ := scanLines(t, r.stdout)
		v := byVolume(vols)
		for name, want := range map[string][4]any{
			"cache":      {"danger", "nested-mount", false, false},
			"scratch":    {"in-use", "own-mount", true, true},
			"pvc-1":      {"in-use", "plugin-mount", false, true},
			"pvc-2":      {"danger", "nested-mount", false, false},
			"share":      {"danger", "nested-mount", false, false},
			"foreign":    {"danger", "foreign-mount", false, true},
			"unrecorded": {"danger", "foreign-mount", false, true},
			"stacked":    {"danger", "stacked-mounts", false, true},
		} {
			if got := [4]any{v[name]["verdict"], v[name]["reasonCode"], v[name]["safeToRemove"], v[name]["mountPoint"]}; got != want {
				t.Errorf("%s: verdict, reasonCode, safeToRemove, mountPoint = %v; want %v", name, got, want)
			}
		}
		nested, _ := v["cache"]["nestedMounts"].([]any)
		if len(nested) != 1 || nested[0].(map[string]any)["mountPoint"] != nas {
			t.Errorf("cache = %v; want %s nested", v["cache"], nas)
		}
		if v["scratch"]["medium"] != "Memory" {
			t.Errorf("scratch = %v; want a Memory mount point", v["scratch"])
		}
		nested, _ = v["pvc-2"]["nestedMounts"].([]any)
		if len(nested) != 2 || nested[1].(map[string]any)["mountPoint"] != bindInCSI {
			t.Errorf("pvc-2 = %v; want its target's tmpfs and %s nested", v["pvc-2"], bindInCSI)
		}
		nested, _ = v["share"]["nestedMounts"].([]any)
		if len(nested) != 1 || nested[0].(map[string]any)["mountPoint"] != nfsInner {
			t.Errorf("share = %v; want %s nested", v["share"], nfsInner)
		}
		mounttest.Intact(t, filepath.Join(k.root, "pods", testUID), before)
		if _, err := os.Stat(scratch); err != nil {
			t.Error(err)
		}
	})

	t.Run("danger in a subPath tree", func(t *testing.T) {
		mounttest.RequireMounts(t)
		k := newKubelet(t, mounttest.RealTempDir(t))
		cache := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
		mounttest.Build(t, cache, "dir data")
		subpaths, err := k.layout.VolumeSubpathsDir(testUID, "cache")
		if err != nil {
			t.Fatal(err)
		}
		// A tmpfs where a subPath bind of the volume belongs: not the
		// volume's own, so its teardown would refuse.
		entry := filepath.Join(subpaths, "app", "0")
		mounttest.Tmpfs(t, entry, "size=1m")

		r := bin.run(t, nil, "scan", "--json", "--root", k.root)
		r.wantCode(t, ExitRefused)
		vols, _, _ := scanLines(t, r.stdout)
		if len(vols) != 1 || vols[0]["verdict"] != "danger" || vols[0]["reasonCode"] != "subpath-foreign-mount" || vols[0]["safeToRemove"] != false {
			t.Errorf("scan = %v; want cache in danger: subpath-foreign-mount, not safe to remove", vols)
		}
	})
}

// wantRow fails unless the scan table has a row with exactly these
// columns (clitest.WantRow).
func wantRow(t *testing.T, out string, cols ...string) {
	t.Helper()
	clitest.WantRow(t, out, cols...)
}

// Only danger (and unknown, and an entry that does not parse) exits 1; a
// problem that is an unreadable entry (not a bad name) is an error.
func TestScanExitCodes(t *testing.T) {
	unreadable := &fs.PathError{Op: "open", Path: "/r/pods/x/volumes", Err: fs.ErrPermission}
	for _, tc := range []struct {
		name string
		s    scanReport
		want int
	}{
		{"empty", scanReport{}, ExitOK},
		{"leftovers only", scanReport{leftovers: []scanLeftover{{"/r/pods/x"}}}, ExitOK},
		{"ok", scanReport{volumes: []*scanVolume{{Verdict: verdictOK, SafeToRemove: true}}}, ExitOK},
		{"in use", scanReport{volumes: []*scanVolume{{Verdict: verdictOK}, {Verdict: verdictInUse}, {Verdict: verdictInUse, SafeToRemove: true}}}, ExitOK},
		{"danger", scanReport{volumes: []*scanVolume{{Verdict: verdictInUse}, {Verdict: verdictDanger}}}, ExitRefused},
		{"unknown", scanReport{volumes: []*scanVolume{{Verdict: verdictUnknown}}}, ExitRefused},
		{"danger and error", scanReport{volumes: []*scanVolume{{Verdict: verdictDanger}, {Verdict: verdictError, err: unreadable}}}, ExitError},
		{"bad name", scanReport{problems: []scanProblem{{err: &volume.InvalidNameError{}}}}, ExitRefused},
		{"vanished", scanReport{problems: []scanProblem{{err: &fs.PathError{Err: fs.ErrNotExist}}}}, ExitRefused},
		{"unreadable", scanReport{problems: []scanProblem{{err: errors.Join(errors.New("x"), unreadable)}}}, ExitError},
		{"not examined", scanReport{volumes: []*scanVolume{{Verdict: verdictError, err: unreadable}}}, ExitError},
	} {
		if got := tc.s.code(); got != tc.want {
			t.Errorf("%s: code() = %d, want %d", tc.name, got, tc.want)
		}
	}
}
