package emptydir

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// kubeletSource is the source the kubelet's emptyDir SetUp gives the
// filesystem it mounts: "tmpfs" for a tmpfs, "nodev" for a hugetlbfs.
func kubeletSource(fsType string) string {
	if fsType == "hugetlbfs" {
		return "nodev"
	}
	return "tmpfs"
}

// adoptPrevious adopts the mount on the volume directory (e, a mount
// root) when the adoption rule (WithAdoption) proves it the one the
// kubelet before nodevol mounted for this volume: it is recorded as the
// volume's own (mountRecord.Adopted), logged and counted; it is left as
// it is (its mode and owner are what that kubelet set). whyNot says why a
// mount is not adopted ("" when adoption is off).
func (m *mounter) adoptPrevious(logger logr.Logger, v *podVolume, e entry, plan setupPlan, old *metadata) (adopted bool, whyNot string, err error) {
	a := m.plugin.adoption
	switch {
	case a == nil:
		return false, "", nil
	case old != nil:
		return false, "the volume has a record of nodevol's, which does not prove this mount", nil
	case m.ref.recordRequired || m.ref.anyMountNamespace:
		return false, "a volume at this location is only ever set up by nodevol", nil
	}
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		return false, "", err
	}
	at, beneath, err := tab.MountsAtFile(e.Fd, m.dir)
	if err != nil {
		return false, "", err
	}
	rec, why := previousKubeletsMount(tab, e, at, beneath, plan, m.ref, m.dir)
	if why == "" {
		// Last: the mount is what that kubelet mounts; was it made
		// while no nodevol process ran, and was it on this volume's
		// directory when this one started (not renamed or moved here
		// since, nor only reached through this volume's name now)?
		if ok, w := a.sessions.beforeNodevol(e.UniqueID); !ok {
			why = w
		} else if ok, w := a.sessions.placedBefore(int(e.ID), m.dir); !ok {
			why = w
		}
	}
	if why != "" {
		logger.V(1).Info("Not adopting the mount on the volume directory", "reason", why)
		return false, why, nil
	}
	if rec.BootID, err = bootID(); err != nil {
		return false, "", err
	}
	meta := &metadata{Medium: plan.medium, SizeLimit: m.source.SizeLimit, Mode: m.source.Mode, StickyBit: m.source.StickyBit, Mount: &rec}
	if plan.medium == volume.MediumHugePages {
		meta.HugePageSize = plan.pageSize
	}
	if err := v.writeMeta(meta); err != nil {
		return false, "", fmt.Errorf("record metadata: %w", err)
	}
	if a.cfg.Adopted != nil {
		a.cfg.Adopted(plan.medium)
	}
	logger.Info("Adopted the previous kubelet's mount as the volume's own", "medium", plan.medium, "fsType", rec.FSType, "mountID", rec.ID, "uniqueMountID", rec.UniqueID)
	return true, "", nil
}

// previousKubeletsMount checks the mount on the volume directory e (at:
// the mounts on it, beneath: those under it, from tab) against what the
// kubelet's SetUp mounts for plan: a single tmpfs ("tmpfs") or hugetlbfs
// ("nodev", of the plan's page size), nothing beneath it, the whole
// filesystem, and its filesystem mounted nowhere else but in the pod's
// subPath directories of the volume (binds the kubelet made for
// containers). It returns the record the mount would get, or why not.
// When it was made, and where it was then, is the session's to say.
func previousKubeletsMount(tab *mountdetect.MountTable, e entry, at, beneath []mountdetect.Mount, plan setupPlan, r volRef, path string) (mountRecord, string) {
	switch {
	case len(beneath) > 0:
		return mountRecord{}, fmt.Sprintf("%d mounts are beneath it (first %s)", len(beneath), beneath[0])
	case len(at) != 1:
		return mountRecord{}, fmt.Sprintf("%d mounts are stacked on the volume directory", len(at))
	}
	fsType := "tmpfs"
	if plan.medium == volume.MediumHugePages {
		fsType = "hugetlbfs"
	}
	if at[0].FSType != fsType || at[0].Source != kubeletSource(fsType) {
		return mountRecord{}, fmt.Sprintf("it is %s, not the %s from %q the kubelet mounts for a %s volume", at[0], fsType, kubeletSource(fsType), plan.medium)
	}
	var self *mountdetect.SourceMount
	var others []mountdetect.SourceMount
	for _, sm := range tab.MountsFromSource(at[0].Source) {
		if uint64(sm.ID) == e.ID {
			self = &sm
		} else {
			others = append(others, sm)
		}
	}
	switch {
	case self == nil:
		return mountRecord{}, "it is not in the mount table"
	case self.Dev != e.Dev:
		return mountRecord{}, "the mount table shows another filesystem on it than statx"
	case self.Root != "/":
		return mountRecord{}, fmt.Sprintf("it mounts %q of its filesystem, not the whole filesystem", self.Root)
	case fsType == "hugetlbfs" && self.HugePageSize != plan.pageSize:
		return mountRecord{}, fmt.Sprintf("its page size is %d, not the volume's %d", self.HugePageSize, plan.pageSize)
	}
	subpaths := subpathsPrefix(r, path, self.MountPoint)
	for _, o := range others {
		if o.Dev == self.Dev && (subpaths == "" || !strings.HasPrefix(o.MountPoint, subpaths)) {
			return mountRecord{}, fmt.Sprintf("its filesystem is mounted elsewhere too (%s)", o.Mount)
		}
	}
	return mountRecord{UniqueID: e.UniqueID, ID: e.ID, Dev: e.Dev, FSType: fsType, Source: at[0].Source, Adopted: true}, ""
}

// subpathsPrefix is the pod's subPath directory of the volume r
// (<pod>/volume-subpaths/<volume>/, with the slash) as the mount table
// names it, found from mountPoint, the table's name of the volume
// directory, whose layout path is path; "" when the two do not end alike
// (the table names the directory otherwise).
func subpathsPrefix(r volRef, path, mountPoint string) string {
	n := 3 // volumes/<escaped plugin>/<dir>
	if r.sub != "" {
		n++
	}
	for range n {
		if filepath.Base(path) != filepath.Base(mountPoint) {
			return ""
		}
		path, mountPoint = filepath.Dir(path), filepath.Dir(mountPoint)
	}
	return filepath.Join(mountPoint, "volume-subpaths", r.dir) + "/"
}

// adoptedProvenBy reports whether the mount identified by mi, listed in
// the mount table with fsType and source, is the one rec (an adopted
// mount's record) names: the kubelet's type and source, and the unique
// mount ID, in the boot the record was written in (unique IDs are unique
// within one boot). Without unique IDs nothing is proven.
func (rec *mountRecord) adoptedProvenBy(mi fsat.MountStat, fsType, source string) bool {
	if (fsType != "tmpfs" && fsType != "hugetlbfs") || rec.FSType != fsType || rec.Source != source || source != kubeletSource(fsType) {
		return false
	}
	return rec.sameAdopted(mi)
}

// sameAdopted compares an adopted mount's recorded identity with mi: its
// unique mount ID, in this boot.
func (rec *mountRecord) sameAdopted(mi fsat.MountStat) bool {
	if mi.UniqueID == 0 || rec.UniqueID != mi.UniqueID || rec.BootID == "" {
		return false
	}
	boot, err := bootID()
	return err == nil && boot == rec.BootID
}

// adoptedElsewhere lists where an adopted mount is mounted when it is not
// on the volume directory: found by its unique mount ID, in this boot.
func adoptedElsewhere(rec *mountRecord) ([]mountdetect.Mount, error) {
	if rec.UniqueID == 0 || rec.BootID == "" {
		return nil, nil
	}
	if boot, err := bootID(); err != nil || boot != rec.BootID {
		return nil, err
	}
	sm, err := fsat.StatmountOf(rec.UniqueID)
	if err != nil {
		return nil, nil // unmounted, or no statmount: nowhere to be found
	}
	return []mountdetect.Mount{{MountPoint: sm.MountPoint, FSType: rec.FSType, Source: rec.Source}}, nil
}
