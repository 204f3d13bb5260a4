package cli

import (
	"testing"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/mountdetect"
)

// The reason codes come from the code of the plan PlanTearDown made and
// from what examineIn found; the uncertain cases cannot be made with real
// mounts on a kernel that is sure, so they are told here.
func TestScanReasonCodes(t *testing.T) {
	const dir = "/link/pods/u/volumes/kubernetes.io~empty-dir/v"
	for _, tc := range []struct {
		name string
		plan emptydir.Plan
		want reasonCode
	}{
		{"gone", emptydir.Plan{Action: emptydir.ActionNone, Code: emptydir.ReasonMissing}, reasonGone},
		{"default", emptydir.Plan{Action: emptydir.ActionRemove, Exists: true, Code: emptydir.ReasonNotMounted}, reasonNotMounted},
		{"mount already gone", emptydir.Plan{Action: emptydir.ActionRemove, Exists: true, Code: emptydir.ReasonMountGone}, reasonNotMounted},
		{"symlink", emptydir.Plan{Action: emptydir.ActionRemove, Exists: true, Code: emptydir.ReasonSymlink}, reasonNotMounted},
		{"file", emptydir.Plan{Action: emptydir.ActionRemove, Exists: true, Code: emptydir.ReasonFile}, reasonNotMounted},
		{"own", emptydir.Plan{Action: emptydir.ActionUnmountAndRemove, Exists: true, Code: emptydir.ReasonOwnMount}, reasonOwnMount},
		{"adopted", emptydir.Plan{Action: emptydir.ActionUnmountAndRemove, Exists: true, Code: emptydir.ReasonAdoptedMount}, reasonAdoptedMount},
		{"nested", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonNestedMounts}, reasonNestedMount},
		{"own mount elsewhere", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonMountElsewhere}, reasonNestedMount},
		{"foreign", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonForeignMount}, reasonForeignMount},
		{"no record", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonNoRecord}, reasonForeignMount},
		{"metadata unreadable", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonMetadataUnreadable}, reasonForeignMount},
		{"changed while examined", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonMountChanged}, reasonForeignMount},
		{"stacked", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonStackedMounts}, reasonStackedMounts},
		{"uncertain", emptydir.Plan{Action: emptydir.ActionRefuse, Code: emptydir.ReasonUncertain}, reasonUncertain},
	} {
		tc.plan.Path = dir
		if got := emptyDirCode(&tc.plan); got != tc.want {
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
	for _, c := range []reasonCode{reasonNotMounted, reasonGone, reasonOwnMount, reasonAdoptedMount, reasonPluginMount, reasonNestedMount, reasonForeignMount, reasonStackedMounts, reasonSubpathForeignMount, reasonUncertain, reasonError} {
		want := map[reasonCode]scanVerdict{
			reasonNotMounted: verdictOK, reasonGone: verdictOK, reasonOwnMount: verdictInUse, reasonAdoptedMount: verdictInUse, reasonPluginMount: verdictInUse,
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
