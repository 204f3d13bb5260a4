package emptydir

// A located volume one level below another plugin's directory
// (Location.Sub, as nodevol-csi sets one up) set up again with another
// medium.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestLocatedSubMediumChangeKeepsQuota: a CSI target set up Default with
// a sizeLimit (a quota project assigned and recorded) is set up again with
// Memory at the same location (a CSI client publishing the same target
// with another medium; the emptydir plugin takes the medium from each
// call). SetUp must refuse, since the spec's medium is not the recorded
// one: it must not mount a tmpfs over the Default directory (hiding its
// data), nor write a record without the quota project, and the teardown
// clears the project assigned at the first SetUp.
func TestLocatedSubMediumChangeKeepsQuota(t *testing.T) {
	mounttest.RequireMounts(t)
	q := &fakeQuotas{}
	e := newEnv(t, t.TempDir(), nil, WithQuotas(q))
	loc := Location{Plugin: "kubernetes.io/csi", Dir: "scratch", Sub: "mount", Meta: "csi_scratch"}
	parent := e.locDir(t, loc)
	mounttest.Build(t, parent, "file vol_data.json {}")
	setUp := func(medium volume.StorageMedium) error {
		spec := volume.Spec{Name: loc.Meta, EmptyDir: &volume.EmptyDirSource{Medium: medium, SizeLimit: 1 << 20}}
		m, err := e.plugin.NewMounterAt(&spec, e.pod(), loc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = detach(m.Path()) })
		return m.SetUp(e.ctx, volume.MounterArgs{})
	}
	if err := setUp(""); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "mount")
	if len(q.assigned) != 1 {
		t.Fatalf("assigned %v; want one project", q.assigned)
	}
	mounttest.Build(t, dir, "file data precious")
	err := setUp(volume.StorageMediumMemory)
	t.Logf("SetUp Memory over a ready Default volume: %v", err)
	if err == nil {
		t.Error("SetUp Memory over a ready Default volume succeeded: the spec's medium is not the recorded one")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data")); err != nil || string(b) != "precious" {
		t.Errorf("the Default volume's data is hidden: %q, %v", b, err)
	}
	md, _ := readMetadata(e.metaDir(t, loc.Meta))
	if md == nil || md.QuotaProjectID == 0 {
		t.Errorf("the record lost the quota project: %+v", md)
	}
	if err := e.tearDownAt(loc); err != nil {
		t.Fatalf("TearDown: %v", err)
	}
	if len(q.cleared) != 1 {
		t.Errorf("quota cleared %v after the teardown; want the project assigned at %v cleared (leaked)", q.cleared, q.assigned)
	}
}
