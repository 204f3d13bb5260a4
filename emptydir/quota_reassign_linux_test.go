package emptydir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestSetUpReassignsAReleasedQuota: a TearDown that released the volume's
// project and then failed (an immutable file inside cannot be removed)
// leaves the ready marker; the next SetUp finds the recorded project no
// longer on the directory and assigns it again, instead of serving the
// volume without its quota.
func TestSetUpReassignsAReleasedQuota(t *testing.T) {
	mnt := mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f")
	files := t.TempDir()
	q := fsquota.New(fsquota.WithProjectsFile(filepath.Join(files, "projects")), fsquota.WithProjidFile(filepath.Join(files, "projid")),
		fsquota.Enforce(), quotaTestKernel(&mounttest.FileQuotaKernel{Path: filepath.Join(files, "limits.json")}))
	e := newEnv(t, filepath.Join(mnt, "kubelet"), nil, WithQuotas(q))
	pod := e.pod(volume.Spec{Name: "cache", EmptyDir: &volume.EmptyDirSource{SizeLimit: 1 << 20}})
	m := e.setUp(t, pod, "cache")
	md, err := readMetadata(e.metaDir(t, "cache"))
	if err != nil || md.QuotaProjectID == 0 {
		t.Fatalf("record %+v, %v; want a project", md, err)
	}
	stuck := filepath.Join(m.Path(), "stuck")
	mounttest.Build(t, m.Path(), "file stuck data")
	mounttest.SetImmutable(t, stuck, true)
	t.Cleanup(func() { mounttest.SetImmutable(t, stuck, false) })
	if err := e.tearDown("cache"); err == nil {
		t.Fatal("TearDown removed an immutable file")
	}
	if id, err := fsquota.ProjectID(m.Path()); err != nil || id != 0 || !isReady(e.metaDir(t, "cache")) {
		t.Fatalf("after the failed TearDown: project %d, %v, ready %v; want the project released and the ready marker left", id, err, isReady(e.metaDir(t, "cache")))
	}
	if err := m.SetUp(e.ctx, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	md, err = readMetadata(e.metaDir(t, "cache"))
	if err != nil || md.QuotaProjectID == 0 {
		t.Fatalf("record after SetUp %+v, %v; want a project", md, err)
	}
	if id, err := fsquota.ProjectID(m.Path()); err != nil || id != md.QuotaProjectID {
		t.Errorf("after SetUp the volume carries project %d, %v; want the recorded %d assigned again", id, err, md.QuotaProjectID)
	}
	if b, err := os.ReadFile(filepath.Join(files, "projects")); err != nil || len(b) == 0 {
		t.Errorf("projects after SetUp = %q, %v; want the project recorded again", b, err)
	}
	mounttest.SetImmutable(t, stuck, false)
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
}
