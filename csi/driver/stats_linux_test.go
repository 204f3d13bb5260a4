package driver

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
)

// TestStatsUpperBound: a Default volume holding more hard-linked files
// than the usage walk remembers is measured with an upper bound, and the
// caller is told: the response header nodevol-usage-bound is "upper" and
// nodevol_csi_usage_upper_bound_total counts it; an exact answer has
// neither. Over gRPC, as the kubelet calls.
func TestStatsUpperBound(t *testing.T) {
	mounttest.RequireMounts(t)
	root := t.TempDir()
	mounttest.Tmpfs(t, root, "") // a private tmpfs: the files go with it
	reg := prometheus.NewRegistry()
	d, err := New(Config{NodeID: "n", KubeletRoot: root, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	d.Register(srv)
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	node := csi.NewNodeClient(conn)
	ctx := context.Background()

	e := &nodeEnv{root: root, d: d, ctx: ctx}
	_, target := e.vol(t, testPodUID, "scratch")
	if _, err := node.NodePublishVolume(ctx, pubReq(testPodUID, target)); err != nil {
		t.Fatal(err)
	}
	stats := func() (int64, metadata.MD) {
		t.Helper()
		var md metadata.MD
		resp, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target}, grpc.Header(&md))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range resp.GetUsage() {
			if u.GetUnit() == csi.VolumeUsage_INODES {
				return u.GetUsed(), md
			}
		}
		t.Fatalf("NodeGetVolumeStats = %v; no inode usage", resp)
		return 0, nil
	}
	if _, md := stats(); len(md.Get(usageBoundHeader)) != 0 || testutil.ToFloat64(d.metrics.upperBound) != 0 {
		t.Errorf("stats of an empty volume: header %v, counter %v; want no upper bound", md.Get(usageBoundHeader), testutil.ToFloat64(d.metrics.upperBound))
	}
	n := mountdetect.MaxHardLinkedInodes + 1000
	mounttest.LinkedFiles(t, target, n, 0)
	inodes, md := stats()
	if got := md.Get(usageBoundHeader); len(got) != 1 || got[0] != "upper" || inodes < int64(n) {
		t.Errorf("stats of a volume with %d hard-linked files: %d inodes, header %s %q; want at least %d inodes, %q", n, inodes, usageBoundHeader, got, n, "upper")
	}
	if got := testutil.ToFloat64(d.metrics.upperBound); got != 1 {
		t.Errorf("nodevol_csi_usage_upper_bound_total = %v after one upper bound; want 1", got)
	}
	if _, err := node.NodeUnpublishVolume(ctx, unpubReq(target)); err != nil {
		t.Errorf("unpublish: %v", err)
	}
}
