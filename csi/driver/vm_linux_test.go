package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestVMSizeLimitEnforced: a Default volume's sizeLimit is a hard limit by
// project quota. It needs a kernel with project quotas and a kubelet root
// on XFS or ext4 mounted with -o prjquota, which this project's CI host
// does not have: hack/quota-vm-test.sh runs it inside its VM (with
// NODEVOL_QUOTA_VM naming such a mount), once per filesystem; everywhere
// else it skips.
func TestVMSizeLimitEnforced(t *testing.T) {
	mnt := os.Getenv("NODEVOL_QUOTA_VM")
	if mnt == "" {
		t.Skip("skipping: needs a kernel with project quotas; runs inside the VM of hack/quota-vm-test.sh (NODEVOL_QUOTA_VM=<prjquota xfs or ext4 mount>)")
	}
	root, err := os.MkdirTemp(mnt, "kubelet-")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	projects := filepath.Join(state, "projects")
	q := fsquota.New(fsquota.Enforce(), fsquota.WithProjectsFile(projects), fsquota.WithProjidFile(filepath.Join(state, "projid")), fsquota.WithFirstID(7000))
	d, err := New(Config{NodeID: "vm", KubeletRoot: root, Quotas: q})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const uid = "0b5e3c1a-7777-4222-8333-444455556666"
	parent := filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~csi", "scratch")
	if err := os.MkdirAll(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(parent, "mount")
	req := &csi.NodePublishVolumeRequest{
		VolumeId:   "vm",
		TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		VolumeContext: map[string]string{ctxEphemeral: "true", AttrSizeLimit: "1Mi"},
	}
	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(projects)
	if err != nil || !strings.Contains(string(b), target) {
		t.Fatalf("no project recorded for the volume: %q, %v", b, err)
	}

	// A pod's container (no CAP_SYS_RESOURCE) is stopped at the limit.
	written, err := mounttest.FillWithoutCapSysResource(t, filepath.Join(target, "big"), 4<<20)
	t.Logf("a writer without CAP_SYS_RESOURCE stopped after %d bytes: %v", written, err)
	if !errors.Is(err, unix.EDQUOT) && !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing 4 MiB into a 1 MiB volume: %v after %d bytes; want EDQUOT or ENOSPC", err, written)
	}
	if written > 1<<20 {
		t.Errorf("%d bytes written past the 1 MiB limit", written)
	}
	stats, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vm", VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if used := stats.GetUsage()[0].GetUsed(); used < written/2 || used > 1<<20+64<<10 {
		t.Errorf("NodeGetVolumeStats used %d bytes; %d were written", used, written)
	}

	if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vm", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("target after unpublish: %v", err)
	}
	if b, err := os.ReadFile(projects); err != nil && !os.IsNotExist(err) || strings.Contains(string(b), target) {
		t.Errorf("projects file after unpublish: %q, %v; want the volume's project released", b, err)
	}
}
