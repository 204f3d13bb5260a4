package driver

// The node service against a pod that attacks its volumes: a target
// republished with another medium, stalled FUSE and foreign mounts above
// or on the target, symlinks, forged records, concurrent calls.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

const testPodUID = "0b5e3c1a-1111-4222-8333-444455556666"

type nodeEnv struct {
	root string
	d    *Driver
	ctx  context.Context
}

func newNodeEnv(t *testing.T) *nodeEnv {
	t.Helper()
	root := t.TempDir()
	d, err := New(Config{NodeID: "n", KubeletRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	return &nodeEnv{root: root, d: d, ctx: context.Background()}
}

// vol makes the kubelet's volumes/kubernetes.io~csi/<name> with its
// vol_data.json and returns it and the target.
func (e *nodeEnv) vol(t *testing.T, uid, name string) (parent, target string) {
	t.Helper()
	parent = filepath.Join(e.root, "pods", uid, "volumes", "kubernetes.io~csi", name)
	mounttest.Build(t, parent, `file vol_data.json {"driverName":"x"}`)
	return parent, filepath.Join(parent, "mount")
}

func pubReq(uid, target string, kv ...string) *csi.NodePublishVolumeRequest {
	vc := map[string]string{ctxEphemeral: "true", ctxPodUID: uid}
	for i := 0; i+1 < len(kv); i += 2 {
		vc[kv[i]] = kv[i+1]
	}
	return &csi.NodePublishVolumeRequest{
		VolumeId:   "v-" + filepath.Base(filepath.Dir(target)),
		TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		VolumeContext: vc,
	}
}

func unpubReq(target string) *csi.NodeUnpublishVolumeRequest {
	return &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}
}

func (e *nodeEnv) publish(t *testing.T, uid, target string, kv ...string) {
	t.Helper()
	if _, err := e.d.NodePublishVolume(e.ctx, pubReq(uid, target, kv...)); err != nil {
		t.Fatalf("publish %s: %v", target, err)
	}
}

func mountedTmpfs(t *testing.T, dir string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC
}

// TestRepublishOtherMediumRefused: a target published as one medium and
// published again as the other. CSI says a second publish at the same
// target with an incompatible volume is ALREADY_EXISTS; whatever the
// answer, the volume must stay what it is, and the data in it visible.
func TestRepublishOtherMediumRefused(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, tc := range []struct{ first, second string }{{"Default", "Memory"}, {"Memory", "Default"}} {
		t.Run(tc.first+"-then-"+tc.second, func(t *testing.T) {
			e := newNodeEnv(t)
			_, target := e.vol(t, testPodUID, "scratch")
			e.publish(t, testPodUID, target, AttrMedium, tc.first, AttrSizeLimit, "4Mi")
			t.Cleanup(func() { // what a failed check left mounted
				for mounttest.IsMountRoot(t, target) {
					_ = unix.Unmount(target, unix.MNT_DETACH)
				}
			})
			snap := mounttest.Sentinels(t, filepath.Join(target, "data"))
			_, err := e.d.NodePublishVolume(e.ctx, pubReq(testPodUID, target, AttrMedium, tc.second, AttrSizeLimit, "4Mi"))
			t.Logf("second publish (%s): %v", tc.second, err)
			mounttest.Intact(t, filepath.Join(target, "data"), snap)
			if got := mountedTmpfs(t, target); got != (tc.first == "Memory") {
				t.Errorf("after the second publish the target is tmpfs=%v; want the first medium kept", got)
			}
			if err == nil {
				t.Errorf("publishing %s over a published %s volume succeeded silently; CSI wants ALREADY_EXISTS for an incompatible volume at the same target", tc.second, tc.first)
			} else if c := status.Code(err); c != codes.AlreadyExists {
				t.Errorf("code %v; want AlreadyExists", c)
			}
			if _, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target)); err != nil {
				t.Fatalf("unpublish: %v", err)
			}
		})
	}
}

// TestStatsUnpublishStalledFUSE: a FUSE filesystem whose daemon
// hung, mounted by the attacker on the kubelet's volume directory (the
// target's parent), on the target with no record, or inside the volume:
// NodeGetVolumeStats and NodeUnpublishVolume must return (refusing),
// never hang, and change nothing.
func TestStatsUnpublishStalledFUSE(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, where := range []string{"parent", "target", "inside", "volumes", "pod"} {
		t.Run(where, func(t *testing.T) {
			e := newNodeEnv(t)
			parent, target := e.vol(t, testPodUID, "scratch")
			e.publish(t, testPodUID, target)
			var at string
			switch where {
			case "parent":
				at = parent
			case "target":
				at = target
			case "inside":
				at = filepath.Join(target, "fuse")
				if err := os.Mkdir(at, 0o755); err != nil {
					t.Fatal(err)
				}
			case "volumes":
				at = filepath.Join(e.root, "pods", testPodUID, "volumes")
			case "pod":
				at = filepath.Join(e.root, "pods", testPodUID)
			}
			mounttest.StalledFUSE(t, "hung", at, "040000")
			err := mounttest.Within(t, 5*time.Second, "NodeGetVolumeStats", func() error {
				_, err := e.d.NodeGetVolumeStats(e.ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target})
				return err
			})
			t.Logf("stats: %v", err)
			if err == nil && where != "inside" { // inside: the walk stays on the volume's mount
				t.Errorf("stats with a stalled FUSE at %s succeeded", where)
			}
			err = mounttest.Within(t, 5*time.Second, "NodeUnpublishVolume", func() error {
				_, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target))
				return err
			})
			t.Logf("unpublish: %v", err)
			if err == nil {
				t.Errorf("unpublish with a stalled FUSE at %s succeeded", where)
			} else if c := status.Code(err); c != codes.FailedPrecondition {
				t.Errorf("unpublish with a stalled FUSE at %s: code %v; want FailedPrecondition (a foreign mount, nothing changed)", where, c)
			}
			if !mounttest.IsMountRoot(t, at) {
				t.Errorf("the FUSE mount at %s was unmounted", at)
			}
		})
	}
}

// TestForeignMountAboveTarget: a NAS mounted on the kubelet's volume
// directory, on volumes/ or on the pod directory (with a directory named
// mount holding data in it): unpublish must change nothing and say
// FAILED_PRECONDITION.
func TestForeignMountAboveTarget(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, where := range []string{"parent", "csi", "volumes", "pod"} {
		t.Run(where, func(t *testing.T) {
			e := newNodeEnv(t)
			parent, target := e.vol(t, testPodUID, "scratch")
			e.publish(t, testPodUID, target)
			at := map[string]string{"parent": parent, "csi": filepath.Dir(parent), "volumes": filepath.Dir(filepath.Dir(parent)), "pod": filepath.Join(e.root, "pods", testPodUID)}[where]
			nas := t.TempDir()
			rel, _ := filepath.Rel(at, target)
			snap := mounttest.Sentinels(t, filepath.Join(nas, rel))
			mounttest.Bind(t, nas, at)
			_, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target))
			t.Logf("unpublish: %v", err)
			if err == nil {
				t.Errorf("unpublish under a NAS mounted at %s succeeded", where)
			} else if c := status.Code(err); c != codes.FailedPrecondition {
				t.Errorf("code %v; want FailedPrecondition", c)
			}
			mounttest.Intact(t, filepath.Join(nas, rel), snap)
			_, err = e.d.NodeGetVolumeStats(e.ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target})
			t.Logf("stats: %v", err)
			if err == nil {
				t.Errorf("stats under a NAS mounted at %s measured the NAS", where)
			}
		})
	}
}

// TestTargetSymlinkOrMount: the target itself a symlink to outside
// data before publish, unpublish and stats; a foreign mount on the target
// before a Memory publish.
func TestTargetSymlinkOrMount(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newNodeEnv(t)
	_, target := e.vol(t, testPodUID, "link")
	outside := t.TempDir()
	snap := mounttest.Sentinels(t, outside)
	if err := os.Symlink(outside, target); err != nil {
		t.Fatal(err)
	}
	for _, medium := range []string{"Default", "Memory"} {
		if _, err := e.d.NodePublishVolume(e.ctx, pubReq(testPodUID, target, AttrMedium, medium)); err == nil {
			t.Errorf("publish %s at a symlinked target succeeded", medium)
		}
	}
	if _, err := e.d.NodeGetVolumeStats(e.ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target}); err == nil {
		t.Error("stats of a symlinked target succeeded")
	}
	_, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target))
	t.Logf("unpublish of a symlink target: %v", err)
	mounttest.Intact(t, outside, snap)
	if fi, err := os.Lstat(target); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Logf("the symlink at the target was removed (%v): harmless, it is the pod's", err)
	}

	// A foreign mount on the target before publishing Memory: never
	// adopted, never covered.
	_, target2 := e.vol(t, testPodUID, "covered")
	nas := t.TempDir()
	snap2 := mounttest.Sentinels(t, nas)
	if err := os.Mkdir(target2, 0o750); err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, nas, target2)
	for _, medium := range []string{"Memory", "Default"} {
		_, err := e.d.NodePublishVolume(e.ctx, pubReq(testPodUID, target2, AttrMedium, medium))
		t.Logf("publish %s over a foreign mount: %v", medium, err)
		if err == nil {
			t.Errorf("publish %s over a foreign mount succeeded", medium)
		}
	}
	if mountedTmpfs(t, target2) {
		t.Error("a tmpfs was stacked over the foreign mount")
	}
	_, err = e.d.NodeUnpublishVolume(e.ctx, unpubReq(target2))
	if c := status.Code(err); c != codes.FailedPrecondition {
		t.Errorf("unpublish over a foreign mount: %v; want FailedPrecondition", err)
	}
	mounttest.Intact(t, nas, snap2)
}

// TestForgedRecordOfAnotherTarget: csi_b's nodevol.json replaced by csi_a's (a
// record of another target); an ordinary located record without Sub at
// the same meta name. Unpublish of b must change nothing.
func TestForgedRecordOfAnotherTarget(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newNodeEnv(t)
	_, ta := e.vol(t, testPodUID, "a")
	_, tb := e.vol(t, testPodUID, "b")
	e.publish(t, testPodUID, ta, AttrMedium, "Memory")
	e.publish(t, testPodUID, tb, AttrMedium, "Default")
	snapA := mounttest.Sentinels(t, filepath.Join(ta, "d"))
	snapB := mounttest.Sentinels(t, filepath.Join(tb, "d"))
	metas := filepath.Join(e.root, "pods", testPodUID, "plugins", "kubernetes.io~empty-dir")
	rec, err := os.ReadFile(filepath.Join(metas, "csi_a", "nodevol.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(metas, "csi_b", "nodevol.json"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.d.NodeUnpublishVolume(e.ctx, unpubReq(tb))
	t.Logf("unpublish b with a's record: %v", err)
	if c := status.Code(err); c != codes.FailedPrecondition {
		t.Errorf("code %v; want FailedPrecondition", c)
	}
	// a's tmpfs bound onto b's target, with a's record at b: not proven.
	mounttest.Bind(t, ta, tb)
	_, err = e.d.NodeUnpublishVolume(e.ctx, unpubReq(tb))
	if err == nil {
		t.Error("unpublish of b with a's tmpfs bound on it and a's record succeeded")
	}
	if !mounttest.IsMountRoot(t, tb) {
		t.Error("a's tmpfs bound on b was unmounted")
	}
	mounttest.Unmount(t, tb)
	mounttest.Intact(t, filepath.Join(ta, "d"), snapA)
	mounttest.Intact(t, filepath.Join(tb, "d"), snapB)
	if _, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(ta)); err != nil {
		t.Errorf("unpublish a: %v", err)
	}
}

// TestConcurrentCallsOnOneTarget: many publishes and unpublishes of one
// target at once: each is done, Aborted, or FailedPrecondition; never a
// tmpfs left mounted without a record or stacked twice.
func TestConcurrentCallsOnOneTarget(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newNodeEnv(t)
	_, target := e.vol(t, testPodUID, "busy")
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				_, err = e.d.NodePublishVolume(e.ctx, pubReq(testPodUID, target, AttrMedium, "Memory"))
			} else {
				_, err = e.d.NodeUnpublishVolume(e.ctx, unpubReq(target))
			}
			if c := status.Code(err); err != nil && c != codes.Aborted {
				t.Errorf("call %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if _, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target)); err != nil {
		t.Fatalf("final unpublish: %v", err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("target left: %v", err)
	}
}

// TestUnpublishWithoutRecord: NodeUnpublishVolume on a target this
// driver never published (another CSI driver's inline volume whose
// target is a plain directory, or a client's mistake): there is no
// csi_<volume> record, and the emptyDir teardown treats it like a stock
// kubelet's Default volume and removes the tree (stopping at mounts).
// Every volume of this driver has a record, so without one nothing but
// an empty directory should go.
func TestUnpublishWithoutRecord(t *testing.T) {
	e := newNodeEnv(t)
	_, target := e.vol(t, testPodUID, "other-driver")
	snap := mounttest.Sentinels(t, target)
	_, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target))
	t.Logf("unpublish of a target with no record: %v", err)
	if _, lerr := os.Lstat(target); lerr != nil {
		t.Errorf("unpublish removed the tree of a target this driver never published (err %v)", err)
		return
	}
	mounttest.Intact(t, target, snap)
}

// TestStatsDuringUnpublish: the kubelet polls NodeGetVolumeStats while
// it publishes and unpublishes. A Memory volume's stats hold the tmpfs
// open, so publish and unpublish wait for a measurement in flight (and
// none starts meanwhile): an unpublish never finds the mount busy
// half-way through, every publish and unpublish succeeds at once, and no
// tmpfs is left.
func TestStatsDuringUnpublish(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newNodeEnv(t)
	_, target := e.vol(t, testPodUID, "polled")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = e.d.NodeGetVolumeStats(e.ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target})
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 300; i++ {
		e.publish(t, testPodUID, target, AttrMedium, "Memory")
		mounttest.Build(t, target, "file a x")
		if _, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target)); err != nil {
			t.Fatalf("iteration %d: unpublish during stats polling = %v; want success", i, err)
		}
		if _, err := os.Lstat(target); !os.IsNotExist(err) {
			t.Fatalf("iteration %d: target left after a successful unpublish", i)
		}
	}
}

// TestRefusalEscapesMountNames: the pod names the mount points inside its
// volume. One named with a newline and an ANSI escape appears in the
// FAILED_PRECONDITION message Go-quoted, as mountdetect.Mount.String shows
// every mount: it can neither forge a line of the kubelet's log nor reach
// a terminal.
func TestRefusalEscapesMountNames(t *testing.T) {
	mounttest.RequireMounts(t)
	e := newNodeEnv(t)
	_, target := e.vol(t, testPodUID, "scratch")
	e.publish(t, testPodUID, target, AttrMedium, "Default")
	const evil = "evil\nE1123 forged log line\x1b[2J"
	nested := filepath.Join(target, evil)
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Tmpfs(t, nested, "size=64k")
	_, err := e.d.NodeUnpublishVolume(e.ctx, unpubReq(target))
	if c := status.Code(err); c != codes.FailedPrecondition {
		t.Fatalf("unpublish with a mount inside: %v; want FailedPrecondition", err)
	}
	msg := status.Convert(err).Message()
	if i := strings.IndexFunc(msg, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }); i >= 0 {
		t.Errorf("the message holds a raw control character: %q", msg)
	}
	if want := strconv.Quote(nested); !strings.Contains(msg, want) {
		t.Errorf("the message %q does not name the mount as %s", msg, want)
	}
	if !mounttest.IsMountRoot(t, nested) {
		t.Error("the mount inside the volume was unmounted")
	}
}
