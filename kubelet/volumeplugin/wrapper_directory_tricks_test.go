package volumeplugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	k8svolume "k8s.io/kubernetes/pkg/volume"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestWrapperDirectoryTricks: the directory the kubelet passes to the
// wrapper's TearDownAt and SetUpAt is parsed by name; spellings that
// resolve elsewhere (an unclean path, a pod UID that extends this one, the
// root through a symlink, another plugin's name in another case, a
// directory an attacker made for a plugin the pod does not use) must
// never tear down, unmount or set up anything but the secret's own
// volume, whose mount, data and metadata stay byte for byte.
func TestWrapperDirectoryTricks(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newSecretEnv(t)
	e.setUp(t)
	want := mounttest.Snapshot(t, e.dir())
	wantMeta := mounttest.Snapshot(t, e.metaDir())
	pods := filepath.Join(e.root, "pods")
	link := filepath.Join(t.TempDir(), "root")
	if err := os.Symlink(e.root, link); err != nil {
		t.Fatal(err)
	}
	// A directory of a plugin the pod does not use, made by an attacker,
	// with a tmpfs of its own on it.
	foreign := filepath.Join(pods, testUID, "volumes", "kubernetes.io~configmap", "creds")
	mounttest.Tmpfs(t, foreign, "size=1m")
	wantForeign := mounttest.Sentinels(t, foreign)

	u, err := e.nv.NewUnmounter("wrapped_creds", types.UID(testUID))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.nv.NewMounter(emptyDirSpec("wrapped_creds", v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}), e.pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{
		e.dir() + "/",
		e.dir() + "/.",
		filepath.Join(pods, testUID, "volumes") + "//kubernetes.io~secret/creds",
		filepath.Join(pods, testUID, "volumes", "kubernetes.io~secret") + "/x/../creds",
		filepath.Join(pods, testUID+"0", "volumes", "kubernetes.io~secret", "creds"),
		filepath.Join(pods, testUID, "volumes", "kubernetes.io~secret"),
		filepath.Join(link, "pods", testUID, "volumes", "kubernetes.io~secret", "creds"),
		filepath.Join(pods, testUID, "plugins", "kubernetes.io~empty-dir", "wrapped_creds"),
	} {
		if err := u.TearDownAt(dir); !errors.Is(err, ErrOtherDirectory) {
			t.Errorf("TearDownAt(%s) = %v; want ErrOtherDirectory", dir, err)
		}
		if err := m.SetUpAt(dir, k8svolume.MounterArgs{}); !errors.Is(err, ErrOtherDirectory) {
			t.Errorf("SetUpAt(%s) = %v; want ErrOtherDirectory", dir, err)
		}
	}
	// Well-formed directories of other plugins: the record in
	// wrapped_creds is the secret's, so nothing is done.
	for _, dir := range []string{
		foreign,
		filepath.Join(pods, testUID, "volumes", "kubernetes.io~Secret", "creds"),
		filepath.Join(pods, testUID, "volumes", "kubernetes.io~secret", "Creds"),
	} {
		if err := u.TearDownAt(dir); !errors.Is(err, emptydir.ErrOtherVolumesRecord) {
			t.Errorf("TearDownAt(%s) = %v; want emptydir.ErrOtherVolumesRecord", dir, err)
		}
		// SetUp's failure reaches the kubelet as its uncertain-progress
		// error, which carries the message only.
		if err := m.SetUpAt(dir, k8svolume.MounterArgs{}); err == nil || !strings.Contains(err.Error(), emptydir.ErrOtherVolumesRecord.Error()) {
			t.Errorf("SetUpAt(%s) = %v; want emptydir.ErrOtherVolumesRecord's message", dir, err)
		}
	}
	mounttest.Intact(t, foreign, wantForeign)
	mounttest.Intact(t, e.dir(), want)
	mounttest.Intact(t, e.metaDir(), wantMeta)
	if n := len(mountsAt(t, e.dir())); n != 1 {
		t.Fatalf("%d mounts at %s; want the secret's one", n, e.dir())
	}
	if err := e.tearDown(); err != nil {
		t.Fatalf("secret TearDown = %v", err)
	}
	mounttest.Intact(t, foreign, wantForeign)
}
