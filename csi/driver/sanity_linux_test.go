package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// notApplicable are the csi-sanity specs (regular expressions, as
// csi-sanity's --ginkgo.skip takes them) that need a controller service:
// the controller and group-controller suites, and the two node specs that
// create their volume with CreateVolume. An inline ephemeral volume has no
// controller: the kubelet publishes it straight from the pod spec, and the
// driver offers no CONTROLLER_SERVICE. Every identity and node spec else
// runs; those of node capabilities the driver does not offer (staging,
// expansion, multi-writer) skip themselves.
var notApplicable = []string{
	`\[Controller Server\]`,
	`\[GroupController`,
	`Node Service NodeUnpublishVolume should remove target path`,
	`Node Service NodeGetVolumeStats should fail when volume does not exist on the specified path`,
}

// TestSanity runs csi-sanity's identity and node specs against the driver
// in process, with this package's own specs for the safety property in
// the same run (safetySpecs).
func TestSanity(t *testing.T) {
	canMount := os.Geteuid() == 0 && mounttest.InPrivateNamespace()
	if !canMount && os.Getenv("CI") == "true" {
		t.Fatal("CI=true, and the safety specs need root in a private mount namespace (mounts)")
	}
	root := t.TempDir()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	d := startDriver(t, root, sock)

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(t.TempDir(), "sanity-target")
	cfg.StagingPath = filepath.Join(t.TempDir(), "sanity-staging")
	cfg.IdempotentCount = 0
	sc := sanity.GinkgoTest(&cfg)
	defer sc.Finalize()
	safetySpecs(&safetyEnv{root: root, sock: sock, driver: d, canMount: canMount})

	RegisterFailHandler(Fail)
	suite, reporter := GinkgoConfiguration()
	suite.SkipStrings = append(suite.SkipStrings, notApplicable...)
	suite.Timeout = 5 * time.Minute
	RunSpecs(t, "nodevol-csi: csi-sanity and nodevol's safety specs", suite, reporter)
}

// tb is what startDriver needs of a test: testing.TB or GinkgoT().
type tb interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
	Errorf(string, ...any)
	Cleanup(func())
}

// startDriver serves a driver for the kubelet root root on the socket
// sock until the test ends.
func startDriver(t tb, root, sock string) *Driver {
	t.Helper()
	d, err := New(Config{NodeID: "node-1", Version: "test", KubeletRoot: root, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, ServeOptions{Endpoint: sock}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			return d
		}
		if i == 500 {
			t.Fatalf("the driver did not create %s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type safetyEnv struct {
	root, sock string
	driver     *Driver
	canMount   bool
}

// podVolume is one inline volume of one pod, laid out as the kubelet lays
// it out before NodePublishVolume: volumes/kubernetes.io~csi/<name> with
// its vol_data.json.
type podVolume struct {
	uid, name, target, parent string
}

func (e *safetyEnv) newPodVolume(name string) podVolume {
	uid := sanity.PseudoUUID()
	parent := filepath.Join(e.root, "pods", uid, "volumes", "kubernetes.io~csi", name)
	Expect(os.MkdirAll(parent, 0o750)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(parent, "vol_data.json"), []byte(`{"driverName":"`+DefaultName+`"}`), 0o644)).To(Succeed())
	return podVolume{uid: uid, name: name, target: filepath.Join(parent, "mount"), parent: parent}
}

func (v podVolume) publishRequest(attrs ...string) *csi.NodePublishVolumeRequest {
	req := pubReq(v.uid, v.target, append([]string{ctxPodName, "pod-" + v.name, ctxPodNamespace, "default"}, attrs...)...)
	req.VolumeId = "csi-" + v.uid + "-" + v.name
	return req
}

func (v podVolume) unpublishRequest() *csi.NodeUnpublishVolumeRequest {
	return &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-" + v.uid + "-" + v.name, TargetPath: v.target}
}

// writeSentinels fills dir with files whose bytes are checked later.
func writeSentinels(dir string) map[string][]byte {
	want := map[string][]byte{
		"a":         []byte("sentinel a\n"),
		"sub/b":     []byte(strings.Repeat("nodevol ", 1000)),
		"sub/d/c.x": {0, 1, 2, 255},
	}
	for name, b := range want {
		p := filepath.Join(dir, name)
		Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(Succeed())
		Expect(os.WriteFile(p, b, 0o644)).To(Succeed())
	}
	return want
}

func expectSentinels(dir string, want map[string][]byte) {
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		ExpectWithOffset(1, err).NotTo(HaveOccurred(), "sentinel %s", name)
		ExpectWithOffset(1, got).To(Equal(b), "sentinel %s changed", name)
	}
}

// mountTmpfs mounts a tmpfs "NAS" at dir until the spec ends.
func mountTmpfs(dir string) {
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	Expect(unix.Mount("nas", dir, "tmpfs", 0, "size=4m")).To(Succeed())
	DeferCleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

func isMountPoint(dir string) bool {
	var sx, parent unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &sx) != nil ||
		unix.Statx(unix.AT_FDCWD, filepath.Dir(dir), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &parent) != nil {
		return false
	}
	return sx.Mnt_id != parent.Mnt_id
}

func expectCode(err error, code codes.Code) {
	ExpectWithOffset(1, status.Code(err)).To(Equal(code), "error: %v", err)
}

// safetySpecs are nodevol's own specs, run with csi-sanity's: what an
// ephemeral volume of this driver promises.
func safetySpecs(e *safetyEnv) {
	Describe("nodevol-csi", func() {
		var node csi.NodeClient
		BeforeEach(func() {
			conn, err := grpc.NewClient("unix://"+e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(conn.Close)
			node = csi.NewNodeClient(conn)
		})
		ctx := context.Background()

		for _, medium := range []string{"Default", "Memory"} {
			It("publishes a "+medium+" volume at the kubelet's target path, idempotently, and unpublish removes only it", func() {
				if medium == "Memory" && !e.canMount {
					Skip("a Memory volume is a tmpfs: mounting needs root in a private mount namespace")
				}
				v := e.newPodVolume("scratch-" + strings.ToLower(medium))
				req := v.publishRequest(AttrMedium, medium, AttrSizeLimit, "8Mi")
				for range 2 {
					_, err := node.NodePublishVolume(ctx, req)
					Expect(err).NotTo(HaveOccurred())
				}
				Expect(isMountPoint(v.target)).To(Equal(medium == "Memory"))
				want := writeSentinels(v.target)
				stats, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: req.VolumeId, VolumePath: v.target})
				Expect(err).NotTo(HaveOccurred())
				Expect(stats.GetUsage()).To(HaveLen(2))
				Expect(stats.GetUsage()[0].GetUsed()).To(BeNumerically(">=", 8000))
				expectSentinels(v.target, want)
				for range 2 {
					_, err := node.NodeUnpublishVolume(ctx, v.unpublishRequest())
					Expect(err).NotTo(HaveOccurred())
				}
				Expect(v.target).NotTo(BeAnExistingFile())
				Expect(filepath.Join(v.parent, "vol_data.json")).To(BeARegularFile(), "the kubelet's file is the kubelet's to remove")
			})

			It("refuses to unpublish a "+medium+" volume while a mount is inside it, keeps every byte, and unpublishes once it is gone", func() {
				if !e.canMount {
					Skip("mounting a NAS inside the volume needs root in a private mount namespace")
				}
				v := e.newPodVolume("nas-" + strings.ToLower(medium))
				_, err := node.NodePublishVolume(ctx, v.publishRequest(AttrMedium, medium))
				Expect(err).NotTo(HaveOccurred())
				own := writeSentinels(v.target)
				nas := filepath.Join(v.target, "data", "nas")
				mountTmpfs(nas)
				shared := writeSentinels(nas)
				for range 3 { // the kubelet retries with backoff
					_, err = node.NodeUnpublishVolume(ctx, v.unpublishRequest())
					expectCode(err, codes.FailedPrecondition)
					Expect(status.Convert(err).Message()).To(ContainSubstring(nas), "the refusal names the mount")
					expectSentinels(nas, shared)
					expectSentinels(v.target, own)
				}
				Expect(testutil.ToFloat64(e.driver.metrics.refused)).To(BeNumerically(">=", 3))
				Expect(unix.Unmount(nas, 0)).To(Succeed())
				_, err = node.NodeUnpublishVolume(ctx, v.unpublishRequest())
				Expect(err).NotTo(HaveOccurred())
				Expect(v.target).NotTo(BeAnExistingFile())
			})
		}

		It("refuses to unpublish while a foreign filesystem is mounted on the target itself, and never unmounts it", func() {
			if !e.canMount {
				Skip("needs root in a private mount namespace")
			}
			v := e.newPodVolume("covered")
			_, err := node.NodePublishVolume(ctx, v.publishRequest())
			Expect(err).NotTo(HaveOccurred())
			mountTmpfs(v.target) // someone else's tmpfs over the Default volume
			shared := writeSentinels(v.target)
			_, err = node.NodeUnpublishVolume(ctx, v.unpublishRequest())
			expectCode(err, codes.FailedPrecondition)
			Expect(isMountPoint(v.target)).To(BeTrue(), "the foreign mount was unmounted")
			expectSentinels(v.target, shared)
		})

		It("a restarted driver recognises a published volume from its record and tears it down with the same care", func() {
			if !e.canMount {
				Skip("needs root in a private mount namespace")
			}
			v := e.newPodVolume("restart")
			_, err := node.NodePublishVolume(ctx, v.publishRequest(AttrMedium, "Memory", AttrSizeLimit, "4Mi"))
			Expect(err).NotTo(HaveOccurred())
			nas := filepath.Join(v.target, "nas")
			mountTmpfs(nas)
			shared := writeSentinels(nas)

			// A second driver over the same kubelet root, as a restarted
			// process is: it knows nothing but what is on disk. Called
			// directly: it cannot serve while the first one does (the
			// root's lock for the driver's name).
			node2, err := New(Config{NodeID: "node-1", Version: "test", KubeletRoot: e.root})
			Expect(err).NotTo(HaveOccurred())
			_, err = node2.NodeUnpublishVolume(ctx, v.unpublishRequest())
			expectCode(err, codes.FailedPrecondition)
			expectSentinels(nas, shared)
			Expect(unix.Unmount(nas, 0)).To(Succeed())
			_, err = node2.NodeUnpublishVolume(ctx, v.unpublishRequest())
			Expect(err).NotTo(HaveOccurred())
			Expect(v.target).NotTo(BeAnExistingFile())
		})

		It("never follows a symlink the pod put where the kubelet's volume directory belongs", func() {
			v := e.newPodVolume("link")
			outside := GinkgoT().TempDir()
			want := writeSentinels(filepath.Join(outside, "mount"))
			Expect(os.RemoveAll(v.parent)).To(Succeed())
			Expect(os.Symlink(outside, v.parent)).To(Succeed())
			_, err := node.NodePublishVolume(ctx, v.publishRequest())
			Expect(err).To(HaveOccurred())
			_, err = node.NodeUnpublishVolume(ctx, v.unpublishRequest())
			Expect(err).To(HaveOccurred())
			expectSentinels(filepath.Join(outside, "mount"), want)
			entries, err := os.ReadDir(outside)
			Expect(err).NotTo(HaveOccurred())
			Expect(entries).To(HaveLen(1), "something was made in the symlink's target")
		})

		It("refuses, naming every problem, a request that is not an inline volume at the kubelet's target path", func() {
			v := e.newPodVolume("bad")
			req := v.publishRequest(AttrMedium, "Tape", "color", "blue")
			req.VolumeContext[ctxEphemeral] = "false"
			req.TargetPath = v.parent + "/../bad/mount"
			req.Readonly = true
			_, err := node.NodePublishVolume(ctx, req)
			expectCode(err, codes.InvalidArgument)
			for _, want := range []string{"read-only", "not an inline ephemeral volume", `"Tape"`, `"color"`, "not clean"} {
				Expect(status.Convert(err).Message()).To(ContainSubstring(want))
			}
			for _, target := range []string{
				"/etc",
				filepath.Join(GinkgoT().TempDir(), "pods", v.uid, "volumes", "kubernetes.io~csi", "bad", "mount"),
				filepath.Join(e.root, "pods", v.uid, "volumes", "kubernetes.io~empty-dir", "bad"),
			} {
				req := v.publishRequest()
				req.TargetPath = target
				_, err := node.NodePublishVolume(ctx, req)
				expectCode(err, codes.InvalidArgument)
				_, err = node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "x", TargetPath: target})
				expectCode(err, codes.InvalidArgument)
			}
			block := v.publishRequest()
			block.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
			_, err = node.NodePublishVolume(ctx, block)
			expectCode(err, codes.InvalidArgument)
			Expect(v.target).NotTo(BeAnExistingFile())
		})

		It("reports the metrics of its calls", func() {
			reg := prometheus.NewRegistry()
			d, err := New(Config{NodeID: "n", KubeletRoot: e.root, Registerer: reg})
			Expect(err).NotTo(HaveOccurred())
			_, err = d.Interceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodeUnpublishVolume"},
				func(context.Context, any) (any, error) { return nil, status.Error(codes.FailedPrecondition, "x") })
			expectCode(err, codes.FailedPrecondition)
			mfs, err := reg.Gather()
			Expect(err).NotTo(HaveOccurred())
			var found bool
			for _, mf := range mfs {
				if mf.GetName() == "nodevol_csi_calls_total" {
					for _, m := range mf.GetMetric() {
						labels := map[string]string{}
						for _, l := range m.GetLabel() {
							labels[l.GetName()] = l.GetValue()
						}
						found = found || labels["method"] == "NodeUnpublishVolume" && labels["code"] == "FailedPrecondition" && m.GetCounter().GetValue() == 1
					}
				}
			}
			Expect(found).To(BeTrue(), "no nodevol_csi_calls_total{method=NodeUnpublishVolume,code=FailedPrecondition} 1")
		})
	})
}
