package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

var foreignNS = mountdetect.MountNamespace{State: mountdetect.MountNamespaceForeign, By: mountdetect.EvidenceInitialInode}

func TestCheckRootVisibility(t *testing.T) {
	errNoRoot := errors.New("no such root")
	for _, tc := range []struct {
		name    string
		ns      mountdetect.MountNamespace
		prop    mountdetect.Propagation
		err     error
		visible bool
		why     string
	}{
		{"host", mountdetect.MountNamespace{State: mountdetect.MountNamespaceHost, By: mountdetect.EvidencePID1}, mountdetect.Propagation{}, errNoRoot, true, "the host's mount namespace"},
		{"slave", foreignNS, mountdetect.Propagation{Master: 3, MountPoint: "/host/var/lib/kubelet"}, nil, true, "receives the host's mounts (slave (master:3) at /host/var/lib/kubelet"},
		{"shared", foreignNS, mountdetect.Propagation{PeerGroup: 2, MountPoint: "/host"}, nil, true, "receives the host's mounts (shared:2 at /host"},
		{"private", foreignNS, mountdetect.Propagation{MountPoint: "/host/var/lib/kubelet"}, nil, false, "on a private mount (at /host/var/lib/kubelet): a mount the host makes under it after this process started is not seen here; give the hostPath mountPropagation: HostToContainer"},
		{"unknown namespace, private", mountdetect.MountNamespace{State: mountdetect.MountNamespaceUnknown}, mountdetect.Propagation{MountPoint: "/"}, nil, false, "is on a private mount"},
		{"error", foreignNS, mountdetect.Propagation{}, errNoRoot, false, "cannot be told: no such root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := checkRootVisibility(tc.ns, "/host/var/lib/kubelet", func(string) (mountdetect.Propagation, error) { return tc.prop, tc.err })
			if v.visible != tc.visible || !strings.Contains(v.why, tc.why) {
				t.Errorf("checkRootVisibility = %v, %q; want %v, containing %q", v.visible, v.why, tc.visible, tc.why)
			}
			if (v.err != nil) != (tc.err != nil && tc.ns.State != mountdetect.MountNamespaceHost) {
				t.Errorf("err = %v; want it set only when the propagation was asked for and failed", v.err)
			}
		})
	}
}

// hostAndContainerView is a kubelet root as a DaemonSet's container sees
// it: the "host" root sits on a shared mount, and the container's view is
// a bind of it at another path, made a slave (mountPropagation
// HostToContainer) or private (None). The volume's NAS directory is
// returned by its host path.
func hostAndContainerView(t *testing.T, propagation uintptr) (hostRoot, containerRoot, hostNAS string) {
	t.Helper()
	host, view := mounttest.HostAndView(t, mounttest.RealTempDir(t), propagation)
	k := newKubelet(t, host)
	cache := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
	hostNAS = filepath.Join(cache, "nas")
	if err := os.Mkdir(hostNAS, 0o755); err != nil {
		t.Fatal(err)
	}
	return k.root, filepath.Join(view, "kubelet"), hostNAS
}

// A Memory emptyDir the kubelet sets up after the agent's container
// started: in the agent's mount namespace its tmpfs is a propagated copy,
// the same superblock under another mount ID than the one SetUp recorded
// in the kubelet's. The agent's scan (from a namespace that is not the
// host's) knows it for the volume's own mount, in use, as a scan in the
// kubelet's namespace does; proven by mount ID alone it would be a foreign
// mount, a danger that is not there.
func TestScanFromContainerKnowsMemoryVolumes(t *testing.T) {
	mounttest.RequireMounts(t)
	hostRoot, containerRoot, _ := hostAndContainerView(t, unix.MS_SLAVE)
	layout, err := volume.NewLayout(hostRoot)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{root: hostRoot, layout: layout, plugin: emptydir.New(volume.NewHost(layout, nil, 1<<30))}
	mem := k.setUp(t, testUID2, "mem", volume.EmptyDirSource{Medium: volume.StorageMediumMemory, SizeLimit: 1 << 20})
	inContainer := filepath.Join(containerRoot, strings.TrimPrefix(mem, hostRoot))
	if ok, _, err := mountdetect.IsMountPoint(inContainer); err != nil || !ok {
		t.Fatalf("the Memory volume's tmpfs did not propagate to the container's view: IsMountPoint = %v, %v", ok, err)
	}
	// The agent's namespace: a private copy of this one, without the
	// host's view (a container has only its hostPath).
	agent := mounttest.StartPrivateNamespace(t)
	var fromHost, fromContainer *scanReport
	var errs [3]error
	agent.Do(func() {
		errs[0] = unix.Unmount(mem, 0)
		fromHost, errs[1] = scanRoot(containerRoot)
		fromContainer, errs[2] = scanRootWithin(containerRoot, volume.DefaultScanLimits(), scanOptionsFrom(foreignNS)...)
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	verdict := func(rep *scanReport) (scanVerdict, reasonCode) {
		for _, v := range rep.volumes {
			if v.Volume == "mem" {
				return v.Verdict, v.ReasonCode
			}
		}
		t.Fatalf("no volume mem in the scan: %+v", rep.volumes)
		return 0, 0
	}
	if v, c := verdict(fromContainer); v != verdictInUse || c != reasonOwnMount {
		t.Errorf("the agent's scan: %s (%s); want in-use (own-mount): the volume's own tmpfs, seen through propagation, is no danger", v, c)
	}
	if v, c := verdict(fromHost); v != verdictDanger || c != reasonForeignMount {
		t.Errorf("the same scan proving mounts by mount ID: %s (%s); want danger (foreign-mount), or this test shows nothing", v, c)
	}
}
