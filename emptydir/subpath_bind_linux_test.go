package emptydir

import (
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestSetUpInPlaceWithSubpathBind: the kubelet binds a container's subPath
// of a Memory volume under volume-subpaths/<volume>/; SetUp again (a
// configMap volume's periodic one) finds the volume in place, and
// TearDown, once the kubelet removed the bind, unmounts it. A bind
// anywhere else still makes the tmpfs mounted elsewhere.
func TestSetUpInPlaceWithSubpathBind(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t, filepath.Join(t.TempDir(), "kubelet"), nil)
	pod, _ := e.memoryVolume(t)
	dir := e.setUp(t, pod, "cache").Path()
	sub, err := e.layout.SubpathDir(testUID, "cache", "app", 0)
	if err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, dir, sub)
	m, err := e.plugin.NewMounter(pod.Volume("cache"), pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(e.ctx, volume.MounterArgs{}); err != nil {
		t.Fatalf("SetUp with a subPath bind of the volume: %v", err)
	}
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	mounttest.Bind(t, dir, elsewhere)
	if err := m.SetUp(e.ctx, volume.MounterArgs{}); err == nil {
		t.Error("SetUp with a bind of the volume's tmpfs outside the subPath directory succeeded")
	}
	mounttest.Unmount(t, elsewhere)
	mounttest.Unmount(t, sub)
	if err := e.tearDown("cache"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, dir)
}
