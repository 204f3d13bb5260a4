package subpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

const uid = "uid-1"

type env struct {
	ctx     context.Context
	base    string
	layout  volume.Layout
	cleaner *Cleaner
	volDir  string
	subDir  string
	plugin  *emptydir.Plugin
}

func newEnv(t *testing.T) *env {
	_, ctx := ktesting.NewTestContext(t)
	base := t.TempDir()
	l, _ := volume.NewLayout(filepath.Join(base, "kubelet"))
	e := &env{ctx: ctx, base: base, layout: l, cleaner: New(l), plugin: emptydir.New(volume.NewHost(l, nil, 0))}
	pod := &volume.Pod{UID: uid, Volumes: []volume.Spec{{Name: "data", EmptyDir: &volume.EmptyDirSource{}}}}
	m, err := e.plugin.NewMounter(&pod.Volumes[0], pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	e.volDir = m.Path()
	e.subDir, _ = l.VolumeSubpathsDir(uid, "data")
	return e
}

func TestCleanMissingIsSuccess(t *testing.T) {
	e := newEnv(t)
	if err := e.cleaner.Clean(e.ctx, uid, "data"); err != nil {
		t.Fatalf("Clean(missing) = %v", err)
	}
	if err := e.cleaner.Clean(e.ctx, "other-pod", "data"); err != nil {
		t.Fatalf("Clean(missing pod) = %v", err)
	}
	for _, c := range []struct{ uid, vol string }{{"../x", "data"}, {uid, ".."}, {uid, "a/b"}, {"", "data"}} {
		if err := e.cleaner.Clean(e.ctx, c.uid, c.vol); !errors.Is(err, volume.ErrInvalidName) {
			t.Errorf("Clean(%q, %q) = %v; want ErrInvalidName", c.uid, c.vol, err)
		}
	}
}

func TestCleanWithoutMounts(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.base, "outside")
	snap := mounttest.Sentinels(t, outside)
	mounttest.Build(t, e.subDir,
		"dir app/0",
		"file app/1 ",                  // a file entry, not mounted
		"symlink app/2 "+outside,       // a planted symlink: unlinked, not followed
		"symlink sidecar "+outside,     // at the container level too
		"file busy/0/leftover content", // a non-empty entry: rmdir fails, left
	)
	err := e.cleaner.Clean(e.ctx, uid, "data")
	if !errors.Is(err, ErrLeft) || !strings.Contains(err.Error(), filepath.Join(e.subDir, "busy/0")) {
		t.Fatalf("Clean = %v; want ErrLeft naming busy/0", err)
	}
	mounttest.Intact(t, outside, snap)
	for _, gone := range []string{"app", "sidecar"} {
		if _, err := os.Lstat(filepath.Join(e.subDir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.subDir, "busy/0/leftover")); err != nil || string(b) != "content" {
		t.Errorf("non-empty entry was not left alone: %q %v", b, err)
	}
	os.Remove(filepath.Join(e.subDir, "busy/0/leftover"))
	if err := e.cleaner.Clean(e.ctx, uid, "data"); err != nil {
		t.Fatalf("second Clean = %v", err)
	}
	if _, err := os.Lstat(e.subDir); !os.IsNotExist(err) {
		t.Errorf("subpath dir not removed: %v", err)
	}
}

func TestCleanSymlinkAtVolumeLevel(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.base, "outside")
	snap := mounttest.Sentinels(t, outside)
	os.MkdirAll(filepath.Dir(e.subDir), 0o750)
	os.Symlink(outside, e.subDir)
	if err := e.cleaner.Clean(e.ctx, uid, "data"); err != nil {
		t.Fatal(err)
	}
	mounttest.Intact(t, outside, snap)
	if _, err := os.Lstat(e.subDir); !os.IsNotExist(err) {
		t.Errorf("planted symlink not removed: %v", err)
	}
}

// TestCleanRealBindMounts: subPath bind mounts of a directory and of a file
// from inside an emptyDir, as the kubelet makes them; a busy/foreign mount
// is reported and left; TearDown of the volume afterwards succeeds and
// nothing outside the pod directory changed.
func TestCleanRealBindMounts(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	outside := filepath.Join(e.base, "outside")
	snap := mounttest.Sentinels(t, outside)
	mounttest.Build(t, e.volDir, "file sub/dir/data.txt in-volume", "file conf/app.conf cfg")
	mounttest.Bind(t, filepath.Join(e.volDir, "sub/dir"), filepath.Join(e.subDir, "app/0"))
	mounttest.Bind(t, filepath.Join(e.volDir, "conf/app.conf"), filepath.Join(e.subDir, "app/1"))
	mounttest.Bind(t, filepath.Join(e.volDir, "sub/dir"), filepath.Join(e.subDir, "sidecar/0"))
	// Foreign: a tmpfs inside a subpath entry, and one on a container dir.
	foreignInner := filepath.Join(e.subDir, "sidecar/0/inner")
	mounttest.Tmpfs(t, foreignInner, "")
	foreignCtr := filepath.Join(e.subDir, "weird")
	mounttest.Tmpfs(t, foreignCtr, "")
	mounttest.Build(t, foreignCtr, "file keep x")

	entries, err := e.cleaner.List(uid, "data")
	if err != nil || len(entries) < 3 {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	mountedCount := 0
	for _, en := range entries {
		if en.MountPoint {
			mountedCount++
		}
	}
	if mountedCount != 3 {
		t.Errorf("List found %d mounted entries; want 3: %+v", mountedCount, entries)
	}

	err = e.cleaner.Clean(e.ctx, uid, "data")
	var crossing *mountdetect.CrossesMountError
	if !errors.Is(err, ErrLeft) || !errors.As(err, &crossing) {
		t.Fatalf("Clean = %v; want ErrLeft with the foreign mounts", err)
	}
	for _, want := range []string{foreignInner, foreignCtr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name foreign mount %s: %v", want, err)
		}
	}
	// app's bind mounts are gone; the volume's data is intact.
	for _, p := range []string{filepath.Join(e.subDir, "app/0"), filepath.Join(e.subDir, "app/1")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s not cleaned: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.volDir, "sub/dir/data.txt")); string(b) != "in-volume" {
		t.Errorf("volume data changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(e.volDir, "conf/app.conf")); string(b) != "cfg" {
		t.Errorf("bind-mounted file source changed: %q", b)
	}
	// The entry holding a foreign mount, and the foreign container mount, stay.
	if m, _, _ := mountdetect.IsMountPoint(filepath.Join(e.subDir, "sidecar/0")); !m {
		t.Error("sidecar/0 (holding a foreign mount) was unmounted")
	}
	if b, _ := os.ReadFile(filepath.Join(foreignCtr, "keep")); string(b) != "x" {
		t.Error("foreign container mount touched")
	}

	// Once the foreign mounts go, cleaning finishes and TearDown succeeds.
	mounttest.Unmount(t, foreignInner)
	mounttest.Unmount(t, foreignCtr)
	if err := e.cleaner.Clean(e.ctx, uid, "data"); err != nil {
		t.Fatalf("Clean after the foreign mounts are gone = %v", err)
	}
	u, _ := e.plugin.NewUnmounter("data", uid)
	if err := u.TearDown(e.ctx); err != nil {
		t.Fatalf("TearDown = %v", err)
	}
	mounttest.Intact(t, outside, snap)
}

func TestCleanBusyMount(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	mounttest.Build(t, e.volDir, "file sub/f x")
	target := filepath.Join(e.subDir, "app/0")
	mounttest.Bind(t, filepath.Join(e.volDir, "sub"), target)
	f, err := os.Open(filepath.Join(target, "f")) // an open file keeps the mount busy
	if err != nil {
		t.Fatal(err)
	}
	err = e.cleaner.Clean(e.ctx, uid, "data")
	if !errors.Is(err, ErrLeft) || !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), target) {
		t.Fatalf("Clean = %v; want ErrLeft with EBUSY naming %s", err, target)
	}
	if m, _, _ := mountdetect.IsMountPoint(target); !m {
		t.Error("busy subpath mount was detached")
	}
	f.Close()
	if err := e.cleaner.Clean(e.ctx, uid, "data"); err != nil {
		t.Fatalf("Clean once no longer busy = %v", err)
	}
}

// TestCleanMountOnContainerDirDuringWalk: a mount that appears on a
// <container> directory after Clean read the mount table is not entered:
// nothing on it is unlinked, and Clean reports it.
func TestCleanMountOnContainerDirDuringWalk(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newEnv(t)
	mounttest.Build(t, e.subDir, "dir app/0")
	ctrDir := filepath.Join(e.subDir, "app")
	nas := filepath.Join(e.base, "nas")
	mounttest.Build(t, nas, "file 0 precious", "dir 1")
	snap := mounttest.Snapshot(t, nas)
	testHookAfterMountTable = func() { mounttest.Bind(t, nas, ctrDir) }
	t.Cleanup(func() { testHookAfterMountTable = nil })
	err := e.cleaner.Clean(e.ctx, uid, "data")
	if !errors.Is(err, ErrLeft) || !strings.Contains(err.Error(), ctrDir) {
		t.Errorf("Clean = %v; want ErrLeft naming %s", err, ctrDir)
	}
	mounttest.Intact(t, nas, snap)
}
