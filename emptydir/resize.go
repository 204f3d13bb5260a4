package emptydir

import (
	"context"
	"errors"
	"fmt"
)

// ErrResizeUnsupported is matched by the error of ResizeVolume for a
// resize no retry can make: a volume whose medium is not Memory, or a size
// that is not positive (adding or removing a size limit is not supported,
// as in the kubelet).
var ErrResizeUnsupported = errors.New("emptyDir resize not supported")

// ErrResizeDeferred is matched by the error of ResizeVolume for a volume
// that is not set up (no record, no ready marker) or whose tmpfs is not
// mounted: there is nothing to resize yet, and the volume manager retries
// once SetUp has run, as the kubelet defers it.
var ErrResizeDeferred = errors.New("volume not yet mounted; deferring resize")

// ErrShrinkBelowUse is matched by a *ShrinkBelowUseError.
var ErrShrinkBelowUse = errors.New("cannot shrink a tmpfs below its use")

// ShrinkBelowUseError is returned by ResizeVolume when the kernel refuses
// to make the volume's tmpfs smaller than what it holds (fsconfig's
// reconfigure fails with EINVAL, "Too small a size for current use"):
// nothing changed, no byte of the volume is lost.
type ShrinkBelowUseError struct {
	Path string
	// UsedBytes is the volume's use, measured (statfs) right after the
	// refusal; RequestedBytes the size asked for.
	UsedBytes, RequestedBytes int64
	// Err is the kernel's refusal.
	Err error
}

func (e *ShrinkBelowUseError) Error() string {
	return fmt.Sprintf("cannot resize the Memory volume %s to %d bytes: it uses %d bytes, and it is never shrunk below its use (%v)",
		e.Path, e.RequestedBytes, e.UsedBytes, e.Err)
}

// Unwrap returns the kernel's error.
func (e *ShrinkBelowUseError) Unwrap() error { return e.Err }

// Is matches ErrShrinkBelowUse.
func (e *ShrinkBelowUseError) Is(target error) bool { return target == ErrShrinkBelowUse }

// ResizeVolume resizes the tmpfs of the Memory-medium emptyDir volume vol
// of the pod podUID to sizeBytes, in place (the kubelet's
// ResizeEphemeralVolume): the files stay, and the pod sees the new size at
// once. Only the volume's own tmpfs is resized — the single mount on the
// volume directory proven, as TearDown proves it, to be the one SetUp
// made (its record in nodevol.json, its source and mount IDs) — and it is
// reconfigured through the open directory's descriptor (fspick,
// fsconfig), never by path: a directory swapped for a symlink, or a mount
// stacked on the volume after the proof, is never what is resized.
//
// A size below what the volume holds is refused by the kernel, and
// ResizeVolume returns a [*ShrinkBelowUseError] saying how much the volume
// uses; nothing changes. After a resize the record's SizeBytes and
// SizeLimit are the new size (written atomically), so that reconstruction
// ([Plugin.ConstructSpec]) gives a spec of the size the volume has; a later
// SetUp of the ready volume leaves the mount, and so its size, as it is,
// and only a SetUp that has to mount again (the tmpfs vanished) computes
// the size from the spec it is given, as always: the resize survives that
// when the spec's sizeLimit (or the pod's memory limit) was changed
// accordingly, as the kubelet changes it before it resizes.
//
// The volume manager must not run it concurrently with SetUp or TearDown
// of the same volume (it serializes operations per volume anyway).
//
// Errors are [*volume.OperationError] values (Op "Resize"): Final with
// [ErrResizeUnsupported] for a volume that is not Memory (Default,
// HugePages) or a sizeBytes <= 0; Transient with [ErrResizeDeferred] for
// a volume not set up or not mounted, with [ErrForeignMount] for a mount
// on the directory that is not proven the volume's own (nothing is asked
// of it, nothing changes), with a [*ShrinkBelowUseError], or for any
// other failure before the tmpfs changed; Uncertain when the tmpfs was
// resized but the record could not be updated.
func (p *Plugin) ResizeVolume(ctx context.Context, podUID, vol string, sizeBytes int64) error {
	return p.resizeVolume(ctx, podUID, vol, sizeBytes)
}
