package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// The driver's crash tests: a child process — this test binary run again,
// in the parent's mount namespace — runs a driver whose publish or
// unpublish SIGKILLs it at one named point (testhook's, reached by the
// production code itself). Then a new driver starts on the same kubelet
// root and bookkeeping, as the restarted DaemonSet pod would, and the
// kubelet's next calls must end with the volume usable (a publish retried)
// or cleanly gone: no target, no record, no mount, no quota project in
// the bookkeeping or the (stand-in) kernel — while another pod's volume,
// with a NAS mounted inside, stays as it was byte for byte.

const envCSICrashChild = "NODEVOL_CSI_CRASH_CHILD"

type csiCrashCase struct {
	Medium   string         // Default or Memory
	Teardown bool           // crash in unpublish (else in publish)
	At       testhook.Point // where the child dies
	Retry    bool           // after a publish crash, the kubelet publishes again before unpublishing
	Root     string         // kubelet root
	Files    string         // quota bookkeeping and stand-in limits
}

const crashUID, crashBystander = "c0000000-0000-4000-8000-00000000000c", "d0000000-0000-4000-8000-00000000000d"

func csiCrashCases() []csiCrashCase {
	publish := map[string][]testhook.Point{
		"Default": {testhook.SetUpDirCreated, testhook.SetUpQuotaIntent, testhook.QuotaRecorded, testhook.QuotaLimited,
			testhook.SetUpQuotaAssigned, testhook.SetUpMetadataWritten, testhook.SetUpReady},
		"Memory": {testhook.SetUpDirCreated, testhook.SetUpMetadataWritten, testhook.SetUpMounted, testhook.SetUpReady},
	}
	unpublish := map[string][]testhook.Point{
		"Default": {testhook.QuotaUntagged, testhook.TearDownQuotaCleared, testhook.RemoveAllRemoved, testhook.TearDownRemoved, testhook.TearDownDone},
		"Memory":  {testhook.TearDownBeforeUnmount, testhook.TearDownUnmounted, testhook.RemoveAllRemoved, testhook.TearDownRemoved, testhook.TearDownDone},
	}
	var cases []csiCrashCase
	for _, m := range []string{"Default", "Memory"} {
		for _, at := range publish[m] {
			cases = append(cases, csiCrashCase{Medium: m, At: at}, csiCrashCase{Medium: m, At: at, Retry: true})
		}
		for _, at := range unpublish[m] {
			cases = append(cases, csiCrashCase{Medium: m, Teardown: true, At: at})
		}
	}
	return cases
}

// crashDriver is a driver on c's root with quotas on c's bookkeeping
// (limits in a file: this kernel has no quotas), and hook at its crash
// points.
func crashDriver(t testing.TB, c csiCrashCase, hook testhook.Hook) *Driver {
	d, err := New(Config{NodeID: "crash", KubeletRoot: c.Root})
	if err != nil {
		t.Fatal(err)
	}
	q := fsquota.New(fsquota.Enforce(), fsquota.WithFirstID(9000), friend.QuotaHook(hook).(fsquota.Option),
		fsquota.WithProjectsFile(filepath.Join(c.Files, "projects")), fsquota.WithProjidFile(filepath.Join(c.Files, "projid")),
		friend.QuotaKernel(&mounttest.FileQuotaKernel{Path: filepath.Join(c.Files, "limits.json")}).(fsquota.Option))
	layout, err := volume.NewLayout(c.Root)
	if err != nil {
		t.Fatal(err)
	}
	d.plugin = emptydir.New(volume.NewHost(layout, nil, 0), emptydir.WithQuotas(q), friend.EmptyDirHook(hook).(emptydir.Option))
	return d
}

func crashTarget(root, uid, vol string) string {
	return filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~csi", vol, "mount")
}

func crashPublish(d *Driver, target, uid, medium string) error {
	_, err := d.NodePublishVolume(context.Background(), pubReq(uid, target, AttrMedium, medium, AttrSizeLimit, "4Mi"))
	return err
}

func crashUnpublish(d *Driver, target string) error {
	_, err := d.NodeUnpublishVolume(context.Background(), unpubReq(target))
	return err
}

// TestCSICrashChild is the child's half: it runs only with the case in its
// environment, and never returns normally when the crash point is reached.
func TestCSICrashChild(t *testing.T) {
	raw := os.Getenv(envCSICrashChild)
	if raw == "" {
		t.Skip("skipping: the crash child of TestCSICrash (runs only as its child process)")
	}
	var c csiCrashCase
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	armed := !c.Teardown
	d := crashDriver(t, c, func(p testhook.Point, _ string) {
		if armed && p == c.At {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // until the signal lands
		}
	})
	target := crashTarget(c.Root, crashUID, "vol")
	if err := crashPublish(d, target, crashUID, c.Medium); err != nil {
		t.Fatal(err)
	}
	mounttest.Build(t, target, "file data/a from-the-pod", "file data/b/c more")
	armed = true
	if err := crashUnpublish(d, target); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("the crash point %s was never reached", c.At)
}

func TestCSICrash(t *testing.T) {
	if os.Getenv(envCSICrashChild) != "" {
		t.Skip("skipping: this is a crash child")
	}
	mounttest.RequireMounts(t)
	// Directories take project IDs (fsxattr) on XFS without quotas.
	base := mounttest.LoopFS(t, "xfs", 300<<20, "", "-q", "-f")
	for i, c := range csiCrashCases() {
		name := c.Medium + "/" + string(c.At)
		switch {
		case c.Teardown:
			name += "/unpublish"
		case c.Retry:
			name += "/publish-retried"
		default:
			name += "/pod-gone"
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(base, fmt.Sprintf("case-%03d", i))
			c.Root, c.Files = filepath.Join(dir, "kubelet"), filepath.Join(dir, "files")
			for _, d := range []string{c.Root, c.Files} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			runCSICrash(t, c)
		})
	}
}

func runCSICrash(t *testing.T, c csiCrashCase) {
	// The bystander: another pod's Default volume with a NAS inside.
	d0 := crashDriver(t, c, nil)
	other := crashTarget(c.Root, crashBystander, "shared")
	mkParent := func(target string) {
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	mkParent(other)
	if err := crashPublish(d0, other, crashBystander, "Default"); err != nil {
		t.Fatal(err)
	}
	nas := filepath.Join(other, "nas")
	mounttest.Tmpfs(t, nas, "size=1m")
	nasSnap := mounttest.Sentinels(t, nas)
	target := crashTarget(c.Root, crashUID, "vol")
	mkParent(target)

	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCSICrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCSICrashChild+"="+string(b))
	out, err := cmd.CombinedOutput()
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !st.Signaled() || st.Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die at %s: %v\n%s", c.At, err, out)
	}

	// The DaemonSet's pod comes back: a new driver on what is on disk,
	// and the kubelet's next calls.
	d := crashDriver(t, c, nil)
	deadline := time.Now().Add(10 * time.Second)
	if !c.Teardown && c.Retry {
		if err := crashPublish(d, target, crashUID, c.Medium); err != nil {
			t.Fatalf("publish retried after the crash: %v", err)
		}
		mounttest.Build(t, target, "file after-restart yes")
		if c.Medium == "Memory" && !mounttest.IsMountRoot(t, target) {
			t.Error("the retried publish left no tmpfs on the target")
		}
	}
	for {
		err := crashUnpublish(d, target)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unpublish after the crash: %v", err)
		}
		t.Logf("unpublish after the crash (retried, as the kubelet does): %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the target is left: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(c.Root, "pods", crashUID, "plugins", "kubernetes.io~empty-dir", "csi_vol")); !os.IsNotExist(err) {
		t.Errorf("the record is left: %v", err)
	}
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(c.Root, "pods", crashUID)))
	if err != nil || len(ms) > 0 {
		t.Errorf("mounts left under the pod: %v, %v", ms, err)
	}
	projects, _ := os.ReadFile(filepath.Join(c.Files, "projects"))
	if strings.Contains(string(projects), target) {
		t.Errorf("the volume's project is left in the bookkeeping: %q", projects)
	}
	limits, err := (&mounttest.FileQuotaKernel{Path: filepath.Join(c.Files, "limits.json")}).Limits()
	if err != nil || len(limits) != 1 {
		t.Errorf("project limits left: %v, %v; want only the bystander's", limits, err)
	}
	mounttest.Intact(t, nas, nasSnap)
	if err := crashUnpublish(d, other); err == nil {
		t.Error("the bystander's unpublish went through with its NAS inside")
	}
	mounttest.Intact(t, nas, nasSnap)
	_ = unix.Unmount(nas, unix.MNT_DETACH)
}
