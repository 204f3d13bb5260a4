package agent

import (
	"context"
	"testing"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

const testUID = "8a3f0c52-1d4e-4b7a-9c21-6e5d2f1a7b90"

// setUpEmptyDir sets up a Default emptyDir volume called name of pod
// testUID in the kubelet root root, with the emptyDir plugin as the kubelet
// runs it, and returns its directory.
func setUpEmptyDir(t *testing.T, root, name string) string {
	t.Helper()
	l, err := volume.NewLayout(root)
	if err != nil {
		t.Fatal(err)
	}
	pod := &volume.Pod{UID: testUID, Volumes: []volume.Spec{{Name: name, EmptyDir: &volume.EmptyDirSource{}}}}
	m, err := emptydir.New(volume.NewHost(l, nil, 1<<30)).NewMounter(&pod.Volumes[0], pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
		t.Fatalf("SetUp(%s): %v", name, err)
	}
	return m.Path()
}
