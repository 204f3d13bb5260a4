package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// NodePublishVolume makes the inline volume at the request's target path:
// a directory (Default) or a sized tmpfs (Memory), recorded so that
// NodeUnpublishVolume can prove what it made, after a restart too.
// Idempotent: a volume already published at the target is left as it is.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	var errs []error
	if req.GetVolumeId() == "" {
		errs = append(errs, errors.New("no volume ID"))
	}
	if c := req.GetVolumeCapability(); c == nil {
		errs = append(errs, errors.New("no volume capability"))
	} else if err := checkCapability(c); err != nil {
		errs = append(errs, err)
	}
	if req.GetReadonly() {
		errs = append(errs, errors.New("read-only: a scratch volume the pod cannot write to is of no use"))
	}
	if req.GetStagingTargetPath() != "" {
		errs = append(errs, fmt.Errorf("staging target path %q given: this driver does not stage volumes", req.GetStagingTargetPath()))
	}
	attrs, err := parseAttributes(req.GetVolumeContext())
	if err != nil {
		errs = append(errs, err)
	}
	var t target
	if req.GetTargetPath() == "" {
		errs = append(errs, errors.New("no target path"))
	} else if t, err = parseTarget(d.layout, req.GetTargetPath()); err != nil {
		errs = append(errs, err)
	} else if attrs.podUID != "" && attrs.podUID != t.podUID {
		errs = append(errs, fmt.Errorf("the target path is pod %s's, the volume context names pod %s", t.podUID, attrs.podUID))
	}
	if len(errs) > 0 {
		return nil, status.Error(codes.InvalidArgument, joinMessages(errs))
	}
	unlock, err := d.lock(t.path)
	if err != nil {
		return nil, err
	}
	defer unlock()

	log := d.log.WithValues("volumeID", req.GetVolumeId(), "target", t.path, "pod", klog.KRef(attrs.podNamespace, attrs.podName), "podUID", t.podUID)
	ctx = klog.NewContext(ctx, log)
	loc := t.location()
	spec := volume.Spec{Name: loc.Meta, EmptyDir: &volume.EmptyDirSource{Medium: attrs.medium, SizeLimit: attrs.sizeLimit}}
	pod := &volume.Pod{UID: t.podUID, Name: attrs.podName, Namespace: attrs.podNamespace}
	m, err := d.plugin.NewMounterAt(&spec, pod, loc)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
		log.Error(err, "Publishing the volume failed")
		return nil, statusOf(err)
	}
	medium := attrs.medium
	if medium == "" {
		medium = "Default"
	}
	log.Info("Volume published", "medium", medium, "sizeLimit", attrs.sizeLimit)
	return &csi.NodePublishVolumeResponse{}, nil
}

// checkCapability accepts what an inline volume is: a filesystem volume
// (no block device, no filesystem type or mount flags to honour, which
// would otherwise be ignored) for one node.
func checkCapability(c *csi.VolumeCapability) error {
	var errs []error
	if c.GetBlock() != nil {
		errs = append(errs, errors.New("block access: this driver serves only filesystem volumes"))
	} else if mnt := c.GetMount(); mnt == nil {
		errs = append(errs, errors.New("the volume capability has no access type: want mount"))
	} else {
		if mnt.GetFsType() != "" {
			errs = append(errs, fmt.Errorf("filesystem type %q: the volume is a directory or a tmpfs; leave fsType empty", mnt.GetFsType()))
		}
		if len(mnt.GetMountFlags()) > 0 {
			errs = append(errs, fmt.Errorf("mount flags %q are not supported", mnt.GetMountFlags()))
		}
		if mnt.GetVolumeMountGroup() != "" {
			errs = append(errs, errors.New("volume mount group given: this driver does not take it (the kubelet applies fsGroup itself)"))
		}
	}
	switch mode := c.GetAccessMode().GetMode(); mode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	default:
		errs = append(errs, fmt.Errorf("access mode %s: want a single-node writer mode (the volume lives on this node)", mode))
	}
	return errors.Join(errs...)
}

// NodeUnpublishVolume tears the volume at the target path down with the
// emptyDir teardown's guarantees: while anything not the volume's own is
// mounted in or on it, it refuses with FAILED_PRECONDITION, naming every
// such mount, and changes nothing (the kubelet retries with backoff; once
// the mounts are gone the volume goes). Otherwise it unmounts only the
// tmpfs it made, clears the quota, and removes the target directory with
// a removal that never crosses a mount. A target that is not there is
// success.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	var errs []error
	if req.GetVolumeId() == "" {
		errs = append(errs, errors.New("no volume ID"))
	}
	var t target
	var err error
	if req.GetTargetPath() == "" {
		errs = append(errs, errors.New("no target path"))
	} else if t, err = parseTarget(d.layout, req.GetTargetPath()); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, status.Error(codes.InvalidArgument, joinMessages(errs))
	}
	unlock, err := d.lock(t.path)
	if err != nil {
		return nil, err
	}
	defer unlock()

	log := d.log.WithValues("volumeID", req.GetVolumeId(), "target", t.path, "podUID", t.podUID)
	ctx = klog.NewContext(ctx, log)
	u, err := d.plugin.NewUnmounterAt(t.podUID, t.location())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := u.TearDown(ctx); err != nil {
		st := statusOf(err)
		if status.Code(st) == codes.FailedPrecondition {
			d.metrics.refused.Inc()
			log.Info("Unpublish refused: a mount inside or on the volume is not its own; nothing was changed", "reason", status.Convert(st).Message())
		} else {
			log.Error(err, "Unpublishing the volume failed")
		}
		return nil, st
	}
	log.Info("Volume unpublished")
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the volume's use: from its project quota, from
// its own tmpfs, or from a walk that stays on its mount; the capacity is
// its filesystem's. A volume with a foreign mount on it is not measured
// (that filesystem is never asked anything): FAILED_PRECONDITION.
//
// A walk's numbers are an upper bound when the volume holds more
// hard-linked files than the walk remembers (emptydir.Usage.UpperBound).
// The response has no field to say so (CSI 1.13 has only the numbers): the
// response header carries "nodevol-usage-bound: upper", the driver logs it
// and counts it (nodevol_csi_usage_upper_bound_total).
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	var errs []error
	if req.GetVolumeId() == "" {
		errs = append(errs, errors.New("no volume ID"))
	}
	if req.GetVolumePath() == "" {
		errs = append(errs, errors.New("no volume path"))
	}
	if len(errs) > 0 {
		return nil, status.Error(codes.InvalidArgument, joinMessages(errs))
	}
	t, err := parseTarget(d.layout, req.GetVolumePath())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "no volume of this driver at %s: %v", req.GetVolumePath(), err)
	}
	// A measurement holds a Memory volume's mount open: publish and
	// unpublish wait for it (see lock), and it does not start while one of
	// them is in flight.
	done, err := d.measuring(t.path)
	if err != nil {
		return nil, err
	}
	defer done()
	u, err := d.plugin.UsageAt(t.podUID, t.location())
	if err != nil {
		return nil, statusOf(err)
	}
	if u.UpperBound {
		d.metrics.upperBound.Inc()
		d.log.Info("The volume's usage is an upper bound: it holds more hard-linked files than the walk remembers, and those past them are counted at every link",
			"volumeID", req.GetVolumeId(), "target", t.path, "podUID", t.podUID, "remembered", mountdetect.MaxHardLinkedInodes)
		// Outside a gRPC call (a test calling the method) there is no
		// header to set, and nobody to tell.
		_ = grpc.SetHeader(ctx, metadata.Pairs(usageBoundHeader, "upper"))
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Used: u.Bytes, Total: u.FS.CapacityBytes, Available: u.FS.AvailableBytes},
		{Unit: csi.VolumeUsage_INODES, Used: u.Inodes, Total: u.FS.Inodes, Available: u.FS.InodesFree},
	}}, nil
}

// usageBoundHeader is the response header of a NodeGetVolumeStats whose
// numbers are an upper bound (value "upper").
const usageBoundHeader = "nodevol-usage-bound"

// NodeGetCapabilities: volume stats.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		rpc(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS),
	}}, nil
}

// NodeGetInfo reports the node's ID; no volume limit and no topology (the
// volumes live on the node itself).
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.nodeID}, nil
}

// statusOf maps an error of the emptydir plugin to a gRPC status: a
// refusal (a foreign mount in or on the volume) is FAILED_PRECONDITION
// naming every mount, as is a target this driver did not publish (no
// record, not empty); a publish over a volume of the other medium is
// ALREADY_EXISTS; a volume that is not there NOT_FOUND, a final error
// about the request INVALID_ARGUMENT, anything else INTERNAL.
func statusOf(err error) error {
	var refused *emptydir.RefusedError
	var crossed *mountdetect.CrossesMountError
	switch {
	case errors.As(err, &refused):
		return status.Errorf(codes.FailedPrecondition, "%s (%v)", refusalMessage(refused.Plan), err)
	case errors.As(err, &crossed):
		return status.Errorf(codes.FailedPrecondition, "mounts inside the volume: %s (%v)", mountList(crossed.Mounts), err)
	case errors.Is(err, emptydir.ErrMediumChanged):
		// CSI's answer to a publish at a target that holds an
		// incompatible volume.
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, emptydir.ErrForeignMount), errors.Is(err, emptydir.ErrOtherVolumesRecord), errors.Is(err, emptydir.ErrUnexpectedMetadata), errors.Is(err, emptydir.ErrNoRecord), errors.Is(err, emptydir.ErrMountElsewhere):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, mountdetect.ErrOtherMount):
		// Something is mounted on a directory above the volume (the pod
		// directory, volumes/, kubernetes.io~csi, the volume's own
		// directory): the volume is not reached, nothing was changed.
		return status.Errorf(codes.FailedPrecondition, "a filesystem is mounted on a directory above the volume, where none belongs; unmount it and the next retry proceeds (%v)", err)
	case errors.Is(err, fs.ErrNotExist):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, emptydir.ErrInvalidLocation), errors.Is(err, volume.ErrInvalidName):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// refusalMessage says why a teardown is refused, names every mount and
// says what to do (the plan's remedy; else that the next retry looks
// again).
func refusalMessage(p emptydir.Plan) string {
	remedy := p.Remedy
	if remedy == "" {
		remedy = "the next retry looks again"
	}
	return fmt.Sprintf("%s: %s; %s", p.Reason, mountList(p.Mounts), remedy)
}

// mountList names the mounts, each as mountdetect describes a mount (names
// an attacker chose escaped).
func mountList(ms []mountdetect.Mount) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return strings.Join(parts, "; ")
}

// joinMessages is every error's message, in order, in one line.
func joinMessages(errs []error) string {
	msgs := make([]string, 0, len(errs))
	for _, err := range errs {
		msgs = append(msgs, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return strings.Join(msgs, "; ")
}
