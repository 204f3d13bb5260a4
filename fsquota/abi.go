package fsquota

// The kernel ABI this package speaks, in one place: ioctl request numbers,
// quotactl command words, flags, and the structures they carry. Nothing
// here calls the kernel, so the encodings are tested on every platform
// (abi_test.go). golang.org/x/sys has no wrappers for any of it.

// ioctl request encoding, <asm-generic/ioctl.h>: dir | size | type | nr.
// mips, powerpc and sparc use 3 direction bits (none=1, read=2, write=4)
// above a 13-bit size; every other Linux architecture Go supports uses 2
// direction bits (none=0, write=1, read=2) above a 14-bit size.
type iocDir int

const (
	iocRead iocDir = iota
	iocWrite
)

// ioc encodes an ioctl request number for goarch.
func ioc(goarch string, dir iocDir, typ byte, nr byte, size uint32) uint32 {
	dirShift, sizeMask := uint32(30), uint32(1<<14-1)
	read, write := uint32(2), uint32(1)
	switch goarch {
	case "mips", "mipsle", "mips64", "mips64le", "ppc", "ppc64", "ppc64le", "sparc", "sparc64":
		dirShift, sizeMask = 29, 1<<13-1
		read, write = 2, 4
	}
	d := read
	if dir == iocWrite {
		d = write
	}
	return d<<dirShift | (size&sizeMask)<<16 | uint32(typ)<<8 | uint32(nr)
}

// fsxattr is struct fsxattr from <linux/fs.h>: 28 bytes, the project ID at
// offset 12.
type fsxattr struct {
	Xflags     uint32
	Extsize    uint32
	Nextents   uint32
	Projid     uint32
	Cowextsize uint32
	Pad        [8]byte
}

const (
	sizeofFsxattr = 28

	// fsXflagProjinherit (FS_XFLAG_PROJINHERIT): new entries of the
	// directory inherit its project ID (and directories the flag).
	fsXflagProjinherit = 0x00000200
)

// fsIocFsgetxattr returns FS_IOC_FSGETXATTR, _IOR('X', 31, struct fsxattr).
func fsIocFsgetxattr(goarch string) uint32 { return ioc(goarch, iocRead, 'X', 31, sizeofFsxattr) }

// fsIocFssetxattr returns FS_IOC_FSSETXATTR, _IOW('X', 32, struct fsxattr).
func fsIocFssetxattr(goarch string) uint32 { return ioc(goarch, iocWrite, 'X', 32, sizeofFsxattr) }

// fsIocGetversion returns FS_IOC_GETVERSION, _IOR('v', 1, long): an
// inode's generation (the kernel writes an int; the request encodes the
// size of a long).
func fsIocGetversion(goarch string) uint32 {
	size := uint32(8)
	switch goarch {
	case "386", "arm", "mips", "mipsle", "ppc":
		size = 4
	}
	return ioc(goarch, iocRead, 'v', 1, size)
}

// quotactl command words: QCMD(cmd, type) = cmd<<8 | type. They are kept
// uint32 because the generic ones (0x800007…) do not fit an int32.
const prjQuota = 2 // PRJQUOTA

func qcmd(cmd, typ uint32) uint32 { return cmd<<8 | typ&0xff }

const (
	// Generic (VFS) interface, <linux/quota.h>.
	qGetInfo  = 0x800005
	qGetQuota = 0x800007
	qSetQuota = 0x800008
	// XFS interface, <linux/dqblk_xfs.h>: XQM_CMD(x) = 'X'<<8 + x.
	qXGetQuota  = 'X'<<8 + 3
	qXSetQLim   = 'X'<<8 + 4
	qXGetQStatV = 'X'<<8 + 8
)

var (
	cmdGetInfo     = qcmd(qGetInfo, prjQuota)    // 0x80000502
	cmdGetQuota    = qcmd(qGetQuota, prjQuota)   // 0x80000702
	cmdSetQuota    = qcmd(qSetQuota, prjQuota)   // 0x80000802
	cmdXGetQuota   = qcmd(qXGetQuota, prjQuota)  // 0x580302
	cmdXSetQLim    = qcmd(qXSetQLim, prjQuota)   // 0x580402
	cmdXGetQStatV  = qcmd(qXGetQStatV, prjQuota) // 0x580802
	fsQuotaPdqAcct = uint16(1 << 4)              // FS_QUOTA_PDQ_ACCT
	fsQuotaPdqEnfd = uint16(1 << 5)              // FS_QUOTA_PDQ_ENFD
)

const (
	fsDquotVersion   = 1      // FS_DQUOT_VERSION
	fsQstatvVersion1 = 1      // FS_QSTATV_VERSION1
	fsProjQuota      = 2      // FS_PROJ_QUOTA (fs_disk_quota.d_flags)
	fsDqBsoft        = 1 << 2 // FS_DQ_BSOFT
	fsDqBhard        = 1 << 3 // FS_DQ_BHARD
	qifBlimits       = 1      // QIF_BLIMITS
	bbSize           = 512    // fs_disk_quota block fields count 512-byte basic blocks
	qifBlockSize     = 1024   // if_dqblk limits count 1 KiB blocks; usage is in bytes
)

// fsDiskQuota is struct fs_disk_quota, 112 bytes. Every 64-bit field sits
// at a multiple of 8, so the layout is the same on 32-bit platforms.
type fsDiskQuota struct {
	Version      int8
	Flags        int8
	Fieldmask    uint16
	ID           uint32
	BlkHardlimit uint64 // 512-byte blocks
	BlkSoftlimit uint64
	InoHardlimit uint64
	InoSoftlimit uint64
	Bcount       uint64 // 512-byte blocks in use
	Icount       uint64 // inodes in use
	Itimer       int32
	Btimer       int32
	Iwarns       uint16
	Bwarns       uint16
	ItimerHi     int8
	BtimerHi     int8
	RtbtimerHi   int8
	Padding2     int8
	RtbHardlimit uint64
	RtbSoftlimit uint64
	Rtbcount     uint64
	Rtbtimer     int32
	Rtbwarns     uint16
	Padding3     int16
	Padding4     [8]byte
}

const sizeofFsDiskQuota = 112

// ifDqblk is struct if_dqblk, 72 bytes. i386 (natively and as a compat
// task) uses 68 bytes with no tail padding; the explicit pad keeps the Go
// struct 72 bytes everywhere, which is at least what any kernel copies.
type ifDqblk struct {
	Bhardlimit uint64 // 1 KiB blocks
	Bsoftlimit uint64
	Curspace   uint64 // bytes
	Ihardlimit uint64
	Isoftlimit uint64
	Curinodes  uint64
	Btime      uint64
	Itime      uint64
	Valid      uint32
	_          uint32
}

const sizeofIfDqblk = 72

// fsQfilestatv is struct fs_qfilestatv, 24 bytes.
type fsQfilestatv struct {
	Ino      uint64
	Nblks    uint64
	Nextents uint32
	Pad      uint32
}

// fsQuotaStatv is struct fs_quota_statv, 160 bytes (Q_XGETQSTATV; set
// Version to fsQstatvVersion1 before the call).
type fsQuotaStatv struct {
	Version      int8
	Pad1         uint8
	Flags        uint16
	Incoredqs    uint32
	Uquota       fsQfilestatv
	Gquota       fsQfilestatv
	Pquota       fsQfilestatv
	Btimelimit   int32
	Itimelimit   int32
	Rtbtimelimit int32
	Bwarnlimit   uint16
	Iwarnlimit   uint16
	Rtbwarnlimit uint16
	Pad3         uint16
	Pad4         uint32
	Pad2         [7]uint64
}

const sizeofFsQuotaStatv = 160

// ifDqinfo is struct if_dqinfo, 24 bytes (Q_GETINFO).
type ifDqinfo struct {
	Bgrace uint64
	Igrace uint64
	Flags  uint32
	Valid  uint32
}

const sizeofIfDqinfo = 24

// roundUp divides n by unit, rounding up.
func roundUp(n int64, unit int64) uint64 {
	if n <= 0 {
		return 0
	}
	return uint64((n + unit - 1) / unit)
}
