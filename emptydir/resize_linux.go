package emptydir

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/volume"
)

// tooSmallForUse is what tmpfs logs in the filesystem context when a
// reconfigure asks for a size below its current use (Linux
// mm/shmem.c, shmem_reconfigure), with EINVAL.
const tooSmallForUse = "Too small a size for current use"

func (p *Plugin) resizeVolume(ctx context.Context, podUID, vol string, sizeBytes int64) error {
	dir, err := p.path(podUID, vol)
	if err != nil {
		return &volume.OperationError{Kind: volume.Final, Op: "Resize", Path: dir, Err: err}
	}
	fail := func(kind volume.FailureKind, err error) error {
		return &volume.OperationError{Kind: kind, Op: "Resize", Path: dir, Err: err}
	}
	if sizeBytes <= 0 {
		return fail(volume.Final, fmt.Errorf("%w: size %d: addition or removal of a size limit is not supported", ErrResizeUnsupported, sizeBytes))
	}
	if err := ctx.Err(); err != nil {
		return fail(volume.Transient, err)
	}
	logger := logr.FromContextOrDiscard(ctx).WithValues("volume", dir)
	v, err := p.openVolume(ordinaryRef(podUID, vol), false)
	if err != nil {
		return fail(volume.Transient, err)
	}
	defer v.Close()
	meta, err := v.readMeta()
	if err != nil {
		return fail(volume.Transient, fmt.Errorf("read metadata: %w", err))
	}
	if meta == nil || !v.isReady() {
		return fail(volume.Transient, fmt.Errorf("volume %s: %w (it is not set up)", vol, ErrResizeDeferred))
	}
	if meta.Medium != volume.MediumMemory {
		return fail(volume.Final, fmt.Errorf("%w: only a Memory-medium volume can be resized; %s is %s-medium", ErrResizeUnsupported, vol, meta.Medium))
	}
	if meta.Mount == nil || meta.Mount.Pending {
		// Recorded only once SetUp has made and identified the mount.
		return fail(volume.Transient, fmt.Errorf("volume %s: %w (its mount is not recorded yet)", vol, ErrResizeDeferred))
	}
	e, err := v.openEntry()
	if err != nil {
		return fail(volume.Transient, err)
	}
	defer e.Close()
	switch {
	case e.kind == entryMissing:
		return fail(volume.Transient, fmt.Errorf("volume %s: %w (the volume directory does not exist)", vol, ErrResizeDeferred))
	case e.kind == entrySymlink:
		return fail(volume.Transient, fmt.Errorf("%s is a symlink, not the volume's directory; not resizing anything", dir))
	case e.kind != entryDir:
		return fail(volume.Transient, fmt.Errorf("%s is not a directory; not resizing anything", dir))
	case !e.Root:
		return fail(volume.Transient, fmt.Errorf("volume %s: %w (nothing is mounted on its directory)", vol, ErrResizeDeferred))
	}
	ours, err := recordedMountOn(e, dir, meta.Mount, ordinaryRef(podUID, vol))
	if err != nil {
		return fail(volume.Transient, err)
	}
	if !ours || meta.Mount.FSType != "tmpfs" {
		return fail(volume.Transient, fmt.Errorf("%w: the mount on %s (%s) is not the tmpfs SetUp made (or cannot be proven to be; two stacked count as not); not resizing it, nothing changed",
			ErrForeignMount, dir, describeMount(e.MountStat)))
	}
	v.hook.At(testhook.ResizeProven, dir)
	// e.Fd is the proven mount's root, held since the proof: fspick picks
	// that mount's superblock, whatever the name shows by now.
	if err := reconfigureSize(e.Fd, dir, sizeBytes); err != nil {
		return fail(volume.Transient, err)
	}
	logger.V(2).Info("Resized the emptyDir volume's tmpfs", "oldSize", meta.SizeBytes, "newSize", sizeBytes)
	meta.SizeBytes, meta.SizeLimit = sizeBytes, sizeBytes
	if err := v.writeMeta(meta); err != nil {
		return fail(volume.Uncertain, fmt.Errorf("the tmpfs is resized to %d bytes, but recording it failed: %w", sizeBytes, err))
	}
	return nil
}

// reconfigureSize sets size= of the tmpfs whose root is open as fd (path
// names it in errors) through a filesystem context picked from fd.
func reconfigureSize(fd int, path string, sizeBytes int64) error {
	fsfd, err := unix.Fspick(fd, "", unix.FSPICK_CLOEXEC|unix.FSPICK_EMPTY_PATH|unix.FSPICK_NO_AUTOMOUNT|unix.FSPICK_SYMLINK_NOFOLLOW)
	if err != nil {
		return &os.PathError{Op: "fspick", Path: path, Err: err}
	}
	defer unix.Close(fsfd)
	size := strconv.FormatInt(sizeBytes, 10)
	if err := unix.FsconfigSetString(fsfd, "size", size); err != nil {
		return &os.PathError{Op: "fsconfig size=" + size, Path: path, Err: withLog(fsfd, err)}
	}
	err = unix.FsconfigReconfigure(fsfd)
	if err == nil {
		return nil
	}
	log := contextLog(fsfd)
	if err == unix.EINVAL {
		// The kernel's message says why; a kernel that words it
		// otherwise is recognised by the use itself.
		used := int64(-1)
		var st unix.Statfs_t
		if fsat.Retry(func() error { return unix.Fstatfs(fd, &st) }) == nil {
			used = int64(st.Blocks-st.Bfree) * int64(st.Bsize)
		}
		if strings.Contains(log, tooSmallForUse) || used > sizeBytes {
			return &ShrinkBelowUseError{Path: path, UsedBytes: used, RequestedBytes: sizeBytes, Err: &os.SyscallError{Syscall: "fsconfig reconfigure", Err: withLogText(log, err)}}
		}
	}
	return &os.PathError{Op: "fsconfig reconfigure size=" + size, Path: path, Err: withLogText(log, err)}
}

// contextLog reads the messages the kernel left in the filesystem context
// fsfd (one per read, "e tmpfs: ..."), joined by "; ".
func contextLog(fsfd int) string {
	var msgs []string
	buf := make([]byte, 1024)
	for range 16 {
		n, err := unix.Read(fsfd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	return strings.Join(msgs, "; ")
}

func withLog(fsfd int, err error) error { return withLogText(contextLog(fsfd), err) }

// withLogText adds the kernel's message to err, which it wraps.
func withLogText(log string, err error) error {
	if log == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, log)
}
