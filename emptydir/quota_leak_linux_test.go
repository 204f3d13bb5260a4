package emptydir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/volume"
)

// orphanLimits returns the limits of project IDs that nothing records any
// more — neither the projects file nor a volume's nodevol.json under the
// kubelet root: limits nodevol can never clear again, whose IDs
// allocation skips for good.
func (w *quotaWorld) orphanLimits(t *testing.T) map[uint32]int64 {
	t.Helper()
	limits, err := w.kernel.Limits()
	if err != nil {
		t.Fatal(err)
	}
	projects, _ := w.bookkeeping(t)
	recorded := map[uint32]bool{}
	for _, line := range strings.Split(projects, "\n") {
		idStr, _, _ := strings.Cut(line, ":")
		if id, err := strconv.ParseUint(idStr, 10, 32); err == nil {
			recorded[uint32(id)] = true
		}
	}
	filepath.WalkDir(w.e.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == metaFileName {
			if md, err := readMetadata(filepath.Dir(p)); err == nil && md != nil && md.QuotaProjectID != 0 {
				recorded[md.QuotaProjectID] = true
			}
		}
		return nil
	})
	orphans := map[uint32]int64{}
	for id, l := range limits {
		if !recorded[id] {
			orphans[id] = l
		}
	}
	return orphans
}

// dropQuotaDirIdentity rewrites the volume's nodevol.json without
// quotaDirDev and quotaDirIno: a record made before records had them (or
// one forged so by whoever writes in the pod directory).
func dropQuotaDirIdentity(t *testing.T, metaDir string) {
	t.Helper()
	path := filepath.Join(metaDir, metaFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec, "quotaDirDev")
	delete(rec, "quotaDirIno")
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaLimitNotLeftWhenVolumeDirectoryUnreachable: TearDown of a
// Default volume with an enforced quota whose directory TearDown cannot
// reach — the pod's volumes directory moved away by whoever writes in the
// pod directory; or the volume directory removed (by hand, a crash) under
// a record made before records named the directory, or forged to look
// like one — must not drop the last record of the project while its limit
// stays: no limit may remain on a project ID that neither the projects
// file nor any nodevol.json records. (Either the limit is cleared, or the
// record is kept for a later TearDown to clear it.)
func TestQuotaLimitNotLeftWhenVolumeDirectoryUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, w *quotaWorld, volDir, metaDir string)
	}{
		{"volumes directory moved away", func(t *testing.T, w *quotaWorld, volDir, metaDir string) {
			pod := filepath.Join(w.e.root, "pods", testUID)
			if err := os.Rename(filepath.Join(pod, "volumes"), filepath.Join(pod, "elsewhere")); err != nil {
				t.Fatal(err)
			}
		}},
		{"old record, volume directory removed", func(t *testing.T, w *quotaWorld, volDir, metaDir string) {
			dropQuotaDirIdentity(t, metaDir)
			if err := os.Remove(volDir); err != nil {
				t.Fatal(err)
			}
		}},
		{"old record, symlink in the volume directory's place", func(t *testing.T, w *quotaWorld, volDir, metaDir string) {
			dropQuotaDirIdentity(t, metaDir)
			if err := os.Rename(volDir, volDir+".moved"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/nonexistent", volDir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newQuotaWorld(t)
			m := w.e.setUp(t, w.e.pod(limitedSpec("cache")), "cache")
			if limits, err := w.kernel.Limits(); err != nil || len(limits) != 1 {
				t.Fatalf("limits after SetUp = %v, %v; want the volume's", limits, err)
			}
			tc.breakIt(t, w, m.Path(), w.e.metaDir(t, "cache"))
			err := w.e.tearDown("cache")
			if orphans := w.orphanLimits(t); len(orphans) != 0 {
				t.Errorf("TearDown = %v; it left limits %v on project IDs that nothing records any more: nothing can clear them, and allocation skips those IDs for good", err, orphans)
			}
		})
	}
}

// TestOnePodCannotUseUpProjectIDs: a pod whose volumes' directories its
// owner moves out of reach before each teardown (any container that can
// write in its pod directory, pod after pod) must not use up the project
// IDs allocation may hand out: another pod's volume still gets a project.
// Here allocation probes at most 4 IDs (WithMaxProbes); by default 1,024
// such teardowns stop every later Default volume with a sizeLimit on the
// node from being set up.
func TestOnePodCannotUseUpProjectIDs(t *testing.T) {
	const probes = 4
	w := newQuotaWorld(t, fsquota.WithMaxProbes(probes))
	for i := range probes {
		uid := fmt.Sprintf("a0000000-0000-4000-8000-%012d", i)
		pod := &volume.Pod{UID: uid, Namespace: "default", Name: "churn", Volumes: []volume.Spec{limitedSpec("cache")}}
		m, err := w.e.plugin.NewMounter(pod.Volume("cache"), pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetUp(w.e.ctx, volume.MounterArgs{}); err != nil {
			t.Fatalf("SetUp of the churning pod %d: %v", i, err)
		}
		podDir := filepath.Join(w.e.root, "pods", uid)
		if err := os.Rename(filepath.Join(podDir, "volumes"), filepath.Join(podDir, "elsewhere")); err != nil {
			t.Fatal(err)
		}
		u, err := w.e.plugin.NewUnmounter("cache", uid)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.TearDown(w.e.ctx); err != nil {
			t.Logf("TearDown of the churning pod %d: %v", i, err)
			continue
		}
		// The pod is gone: its directory is cleaned up.
		if err := os.RemoveAll(podDir); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.e.plugin.NewMounter(w.e.pod(limitedSpec("cache")).Volume("cache"), w.e.pod(limitedSpec("cache")))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(w.e.ctx, volume.MounterArgs{}); err != nil {
		t.Fatalf("SetUp of another pod's volume after %d churned pods = %v; want a project for it", probes, err)
	}
}

// TestTearDownReleasesTheProjectTheFilesRecord: nodevol.json lives in the
// pod directory, so whoever writes there can rewrite it to name no quota
// project. TearDown of such a volume, with a quota manager, must still
// release the project the bookkeeping files record for the volume's
// path — those are nodevol's, unlike the record — or refuse; it must not
// succeed and leave the path's project (its entry and its limit) behind
// for good, where no later TearDown of that path will ever come.
func TestTearDownReleasesTheProjectTheFilesRecord(t *testing.T) {
	w := newQuotaWorld(t)
	m := w.e.setUp(t, w.e.pod(limitedSpec("cache")), "cache")
	metaDir := w.e.metaDir(t, "cache")
	path := filepath.Join(metaDir, metaFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"quotaProjectID", "quotaPending", "quotaDirDev", "quotaDirIno"} {
		delete(rec, k)
	}
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.e.tearDown("cache"); err != nil {
		t.Logf("TearDown: %v", err)
		return // a refusal keeps everything for a later TearDown
	}
	mustNotExist(t, m.Path())
	projects, projid := w.bookkeeping(t)
	limits, _ := w.kernel.Limits()
	if strings.Contains(projects, m.Path()) || projid != "" || len(limits) != 0 {
		t.Errorf("after a successful TearDown: projects %q, projid %q, limits %v; want the volume's project released (nothing will ever release it now)", projects, projid, limits)
	}
}
