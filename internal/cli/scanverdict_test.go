package cli

import (
	"testing"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/mountdetect"
)

// The reason codes come from what PlanTearDown and examineIn found; the
// uncertain cases cannot be made with real mounts on a kernel that is
// sure, so they are told here.
func TestScanReasonCodes(t *testing.T) {
	const dir, real = "/link/pods/u/volumes/kubernetes.io~empty-dir/v", "/data/pods/u/volumes/kubernetes.io~empty-dir/v"
	on := mountdetect.Mount{MountPoint: real, FSType: "tmpfs"}
	for _, tc := range []struct {
		name string
		plan emptydir.Plan
		want reasonCode
	}{
		{"gone", emptydir.Plan{Action: emptydir.ActionNone}, reasonGone},
		{"default", emptydir.Plan{Action: emptydir.ActionRemove, Exists: true}, reasonNotMounted},
		{"own", emptydir.Plan{Action: emptydir.ActionUnmountAndRemove, Exists: true, Mounts: []mountdetect.Mount{on}}, reasonOwnMount},
		{"nested", emptydir.Plan{Action: emptydir.ActionRefuse, Mounts: []mountdetect.Mount{{MountPoint: real + "/nas"}}}, reasonNestedMount},
		{"nested under a mount", emptydir.Plan{Action: emptydir.ActionRefuse, Info: mountdetect.FSInfo{MountPoint: true, MountPointSure: true, FSType: "tmpfs"}, Mounts: []mountdetect.Mount{{MountPoint: real + "/nas"}}}, reasonNestedMount},
		{"foreign", emptydir.Plan{Action: emptydir.ActionRefuse, Info: mountdetect.FSInfo{MountPoint: true, MountPointSure: true, FSType: "nfs"}, Mounts: []mountdetect.Mount{on}}, reasonForeignMount},
		{"foreign, as listed", emptydir.Plan{Action: emptydir.ActionRefuse, Info: mountdetect.FSInfo{MountPoint: true, MountPointSure: true, FSType: "nfs"}, Mounts: []mountdetect.Mount{{MountPoint: dir}}}, reasonForeignMount},
		{"file mounted on the volume path", emptydir.Plan{Action: emptydir.ActionRefuse, Mounts: []mountdetect.Mount{{MountPoint: dir}}}, reasonForeignMount},
		{"stacked", emptydir.Plan{Action: emptydir.ActionRefuse, Info: mountdetect.FSInfo{MountPoint: true, MountPointSure: true, FSType: "tmpfs"}, Mounts: []mountdetect.Mount{on, on}}, reasonStackedMounts},
		{"uncertain", emptydir.Plan{Action: emptydir.ActionRefuse, Info: mountdetect.FSInfo{FSType: "ext4"}, Mounts: []mountdetect.Mount{{MountPoint: dir, FSType: "ext4"}}}, reasonUncertain},
	} {
		tc.plan.Path = dir
		if got := emptyDirCode(&tc.plan, real); got != tc.want {
			t.Errorf("%s: emptyDirCode(%+v) = %v; want %v", tc.name, tc.plan, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		c    checkResult
		want reasonCode
	}{
		{"gone", checkResult{SafeToRemove: true}, reasonGone},
		{"not mounted", checkResult{Exists: true, MountPointSure: true, SafeToRemove: true}, reasonNotMounted},
		{"mounted", checkResult{Exists: true, MountPoint: true, MountPointSure: true}, reasonPluginMount},
		{"nested", checkResult{Exists: true, MountPointSure: true, NestedMounts: []mountdetect.Mount{{MountPoint: "/x/y"}}}, reasonNestedMount},
		{"mounted with nested", checkResult{Exists: true, MountPoint: true, MountPointSure: true, NestedMounts: []mountdetect.Mount{{MountPoint: "/x/y"}}}, reasonNestedMount},
		{"uncertain", checkResult{Exists: true}, reasonUncertain},
	} {
		if got := pluginCode(&tc.c); got != tc.want {
			t.Errorf("%s: pluginCode(%+v) = %v; want %v", tc.name, tc.c, got, tc.want)
		}
	}
	for _, c := range []reasonCode{reasonNotMounted, reasonGone, reasonOwnMount, reasonPluginMount, reasonNestedMount, reasonForeignMount, reasonStackedMounts, reasonSubpathForeignMount, reasonUncertain, reasonError} {
		want := map[reasonCode]scanVerdict{
			reasonNotMounted: verdictOK, reasonGone: verdictOK, reasonOwnMount: verdictInUse, reasonPluginMount: verdictInUse,
			reasonUncertain: verdictUnknown, reasonError: verdictError,
		}[c]
		if c == reasonNestedMount || c == reasonForeignMount || c == reasonStackedMounts || c == reasonSubpathForeignMount {
			want = verdictDanger
		}
		if got := c.verdict(); got != want {
			t.Errorf("%v.verdict() = %v; want %v", c, got, want)
		}
	}
}
