package emptydir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

const volumeDirMode = 0o777

type mounter struct {
	plugin  *Plugin
	source  volume.EmptyDirSource
	pod     *volume.Pod
	dir     string
	metaDir string
}

func (m *mounter) Path() string { return m.dir }

func (m *mounter) setUpErr(kind volume.FailureKind, err error) error {
	return &volume.OperationError{Kind: kind, Op: "SetUp", Path: m.dir, Err: err}
}

// SetUp creates the volume: a directory (Default), a tmpfs (Memory) or a
// hugetlbfs (HugePages) at Path, then records what it made and writes the
// ready marker. A second SetUp of a ready volume whose medium is still in
// place does nothing; a ready marker whose directory or mount vanished is
// repaired by setting the volume up again.
func (m *mounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	logger := klog.FromContext(ctx).WithValues("volume", m.dir)
	allocatable, err := m.plugin.host.NodeAllocatableMemory()
	if err != nil {
		return m.setUpErr(volume.Transient, fmt.Errorf("node allocatable memory: %w", err))
	}
	plan, err := planSetUp(&m.source, m.pod, allocatable)
	if err != nil {
		return m.setUpErr(volume.Final, err)
	}
	if isReady(m.metaDir) {
		ok, err := m.inPlace(plan)
		if err != nil {
			return m.setUpErr(volume.Transient, err)
		}
		if ok {
			return nil
		}
		logger.V(1).Info("Ready marker present but the volume is not in place; setting it up again", "medium", plan.medium)
	}

	meta := &Metadata{Medium: plan.medium, SizeLimit: m.source.SizeLimit}
	switch plan.medium {
	case mountdetect.MediumDefault:
		err = m.setUpDir(plan, args)
		if err == nil && m.plugin.quotas != nil {
			meta.QuotaProjectID, err = m.plugin.quotas.Assign(m.dir, m.source.SizeLimit)
			if errors.Is(err, errors.ErrUnsupported) {
				// No project quotas on this filesystem: usage is measured
				// by walking, and no project ID is recorded.
				logger.V(2).Info("No project quota for the volume; usage will be measured by walking", "reason", err)
				meta.QuotaProjectID, err = 0, nil
			}
			if err != nil {
				err = fmt.Errorf("assign quota: %w", err)
			}
		}
	case mountdetect.MediumMemory:
		var opts []string
		if plan.size > 0 {
			opts = append(opts, "size="+strconv.FormatInt(plan.size, 10))
			meta.SizeBytes = plan.size
		}
		if kernelSupportsNoswap() {
			opts = append(opts, "noswap")
		}
		err = m.setUpMount(ctx, "tmpfs", "tmpfs", opts, args)
	case mountdetect.MediumHugePages:
		meta.HugePageSize = plan.pageSize
		err = m.setUpMount(ctx, "nodev", "hugetlbfs", []string{"pagesize=" + strconv.FormatInt(plan.pageSize, 10)}, args)
	}
	if err != nil {
		return m.setUpErr(volume.Transient, err)
	}
	if err := writeMetadata(m.metaDir, meta); err != nil {
		return m.setUpErr(volume.Transient, fmt.Errorf("record metadata: %w", err))
	}
	if err := setReady(m.metaDir); err != nil {
		return m.setUpErr(volume.Transient, fmt.Errorf("write ready marker: %w", err))
	}
	logger.V(2).Info("emptyDir set up", "medium", plan.medium, "size", meta.SizeBytes, "hugePageSize", meta.HugePageSize)
	return nil
}

// inPlace reports whether the volume SetUp would create is there already.
func (m *mounter) inPlace(plan setupPlan) (bool, error) {
	info, err := mountdetect.Detect(m.dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.Medium == plan.medium && (plan.medium != mountdetect.MediumHugePages || info.HugePageSize == plan.pageSize), nil
}

func (m *mounter) setUpDir(plan setupPlan, args volume.MounterArgs) error {
	if err := os.MkdirAll(m.dir, volumeDirMode); err != nil {
		return err
	}
	fi, err := os.Lstat(m.dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", m.dir)
	}
	return m.setMode(plan, args)
}

// setMode sets the volume directory's mode whatever the umask (0777, with
// the sticky bit on request) and its group for FSGroup (with setgid, so new
// files inherit the group).
func (m *mounter) setMode(plan setupPlan, args volume.MounterArgs) error {
	mode := os.FileMode(volumeDirMode)
	if plan.sticky {
		mode |= os.ModeSticky
	}
	if args.FSGroup != nil {
		if err := os.Lchown(m.dir, -1, int(*args.FSGroup)); err != nil {
			return err
		}
		mode |= os.ModeSetgid
	}
	return os.Chmod(m.dir, mode)
}

// setUpMount mounts fstype on the volume directory unless that exact
// medium is already mounted there (a SetUp that crashed before writing the
// ready marker); any other mount there is an error.
func (m *mounter) setUpMount(ctx context.Context, source, fstype string, opts []string, args volume.MounterArgs) error {
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return err
	}
	// mount(2) follows a symlink: never mount through one planted at the
	// volume path.
	if fi, err := os.Lstat(m.dir); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s); not mounting %s there", m.dir, fi.Mode().Type(), fstype)
	}
	info, err := mountdetect.Detect(m.dir)
	if err != nil {
		return err
	}
	switch {
	case info.MountPoint && info.FSType == fstype:
		klog.FromContext(ctx).V(2).Info("Already mounted", "volume", m.dir, "fsType", fstype)
	case info.MountPoint || !info.MountPointSure:
		return fmt.Errorf("%s is already a mount point of %s; not mounting %s over it", m.dir, info.FSType, fstype)
	default:
		if err := m.plugin.mounter().Mount(source, m.dir, fstype, opts); err != nil {
			return fmt.Errorf("mount %s on %s (options %v): %w", fstype, m.dir, opts, err)
		}
	}
	return m.setMode(setupPlan{sticky: m.source.StickyBit}, args)
}

func (p *Plugin) mounter() volume.SystemMounter {
	if sm := p.host.Mounter(); sm != nil {
		return sm
	}
	return osMounter{}
}
