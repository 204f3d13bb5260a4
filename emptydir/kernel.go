package emptydir

// MountAPI reports whether this process can use the kernel's mount API
// (fsopen, fsconfig, fsmount; Linux 5.2), with which SetUp makes Memory and
// HugePages volumes. It is found by using it: a tmpfs is created, detached
// and never attached anywhere, then dropped. ok is false with a nil error
// when the kernel has no such calls (ENOSYS); err is set when it could not
// be asked — without CAP_SYS_ADMIN fsopen fails with EPERM whether the
// kernel has it or not. The answer is probed once per process.
func MountAPI() (ok bool, err error) { return mountAPI() }

// TmpfsNoswap reports whether tmpfs takes the noswap option (Linux 6.4),
// which SetUp gives a Memory volume whenever it does, so that the volume's
// pages are never written to swap. It is found by using it: the option is
// set on a new tmpfs context (fsopen, fsconfig), which is then dropped,
// mounting nothing. ok is false with a nil error when tmpfs refuses the
// option (an older kernel; tmpfs in a user namespace); err is set when it
// could not be asked (see MountAPI). The answer is probed once per process.
//
// When it cannot be asked, SetUp passes noswap on Linux 6.4 and later.
func TmpfsNoswap() (ok bool, err error) { return tmpfsNoswap() }
