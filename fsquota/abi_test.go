package fsquota

import (
	"testing"
	"unsafe"
)

func TestIoctlRequestNumbers(t *testing.T) {
	for _, tc := range []struct {
		goarch   string
		get, set uint32
	}{
		{"amd64", 0x801c581f, 0x401c5820},
		{"arm64", 0x801c581f, 0x401c5820},
		{"386", 0x801c581f, 0x401c5820},
		{"arm", 0x801c581f, 0x401c5820},
		{"riscv64", 0x801c581f, 0x401c5820},
		{"loong64", 0x801c581f, 0x401c5820},
		{"s390x", 0x801c581f, 0x401c5820},
		{"mips", 0x401c581f, 0x801c5820},
		{"mipsle", 0x401c581f, 0x801c5820},
		{"mips64", 0x401c581f, 0x801c5820},
		{"mips64le", 0x401c581f, 0x801c5820},
		{"ppc64", 0x401c581f, 0x801c5820},
		{"ppc64le", 0x401c581f, 0x801c5820},
		{"sparc64", 0x401c581f, 0x801c5820},
	} {
		if got := fsIocFsgetxattr(tc.goarch); got != tc.get {
			t.Errorf("FS_IOC_FSGETXATTR on %s = %#x; want %#x", tc.goarch, got, tc.get)
		}
		if got := fsIocFssetxattr(tc.goarch); got != tc.set {
			t.Errorf("FS_IOC_FSSETXATTR on %s = %#x; want %#x", tc.goarch, got, tc.set)
		}
	}
}

// TestGetversionRequest: FS_IOC_GETVERSION as <linux/fs.h> defines it,
// _IOR('v', 1, long), on 64- and 32-bit architectures.
func TestGetversionRequest(t *testing.T) {
	for goarch, want := range map[string]uint32{
		"amd64": 0x80087601, "arm64": 0x80087601, "386": 0x80047601, "arm": 0x80047601,
		"ppc64le": 0x40087601, "mips": 0x40047601, "mips64": 0x40087601,
	} {
		if got := fsIocGetversion(goarch); got != want {
			t.Errorf("FS_IOC_GETVERSION on %s = %#x; want %#x", goarch, got, want)
		}
	}
}

// TestIocAgainstKnownRequests checks the encoder on requests whose numbers
// golang.org/x/sys publishes per architecture (copied from its zerrors
// files): FS_IOC_GETFLAGS = _IOR('f', 1, long) and
// FS_IOC_SET_ENCRYPTION_POLICY = _IOR('f', 19, 12 bytes).
func TestIocAgainstKnownRequests(t *testing.T) {
	for _, tc := range []struct {
		goarch string
		dir    iocDir
		typ    byte
		nr     byte
		size   uint32
		want   uint32
	}{
		{"amd64", iocRead, 'f', 1, 8, 0x80086601},
		{"386", iocRead, 'f', 1, 4, 0x80046601},
		{"s390x", iocRead, 'f', 1, 8, 0x80086601},
		{"ppc64", iocRead, 'f', 1, 8, 0x40086601},
		{"mips", iocRead, 'f', 1, 4, 0x40046601},
		{"sparc64", iocRead, 'f', 1, 8, 0x40086601},
		{"amd64", iocRead, 'f', 19, 12, 0x800c6613},
		{"ppc64", iocRead, 'f', 19, 12, 0x400c6613},
		{"amd64", iocWrite, 'f', 21, 12, 0x400c6615},
		{"mips", iocWrite, 'f', 21, 12, 0x800c6615},
	} {
		if got := ioc(tc.goarch, tc.dir, tc.typ, tc.nr, tc.size); got != tc.want {
			t.Errorf("ioc(%s, %d, %q, %d, %d) = %#x; want %#x", tc.goarch, tc.dir, tc.typ, tc.nr, tc.size, got, tc.want)
		}
	}
}

func TestQuotactlCommandWords(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want uint32
	}{
		{"QCMD(Q_GETINFO, PRJQUOTA)", cmdGetInfo, 0x80000502},
		{"QCMD(Q_GETQUOTA, PRJQUOTA)", cmdGetQuota, 0x80000702},
		{"QCMD(Q_SETQUOTA, PRJQUOTA)", cmdSetQuota, 0x80000802},
		{"QCMD(Q_XGETQUOTA, PRJQUOTA)", cmdXGetQuota, 0x580302},
		{"QCMD(Q_XSETQLIM, PRJQUOTA)", cmdXSetQLim, 0x580402},
		{"QCMD(Q_XGETQSTATV, PRJQUOTA)", cmdXGetQStatV, 0x580802},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x; want %#x", tc.name, tc.got, tc.want)
		}
	}
}

func TestStructLayouts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(struct fsxattr)", unsafe.Sizeof(fsxattr{}), sizeofFsxattr},
		{"offsetof(fsxattr, fsx_projid)", unsafe.Offsetof(fsxattr{}.Projid), 12},
		{"sizeof(struct fs_disk_quota)", unsafe.Sizeof(fsDiskQuota{}), sizeofFsDiskQuota},
		{"offsetof(fs_disk_quota, d_blk_hardlimit)", unsafe.Offsetof(fsDiskQuota{}.BlkHardlimit), 8},
		{"offsetof(fs_disk_quota, d_bcount)", unsafe.Offsetof(fsDiskQuota{}.Bcount), 40},
		{"offsetof(fs_disk_quota, d_icount)", unsafe.Offsetof(fsDiskQuota{}.Icount), 48},
		{"offsetof(fs_disk_quota, d_rtb_hardlimit)", unsafe.Offsetof(fsDiskQuota{}.RtbHardlimit), 72},
		{"offsetof(fs_disk_quota, d_padding4)", unsafe.Offsetof(fsDiskQuota{}.Padding4), 104},
		{"sizeof(struct if_dqblk)", unsafe.Sizeof(ifDqblk{}), sizeofIfDqblk},
		{"offsetof(if_dqblk, dqb_curspace)", unsafe.Offsetof(ifDqblk{}.Curspace), 16},
		{"offsetof(if_dqblk, dqb_curinodes)", unsafe.Offsetof(ifDqblk{}.Curinodes), 40},
		{"offsetof(if_dqblk, dqb_valid)", unsafe.Offsetof(ifDqblk{}.Valid), 64},
		{"sizeof(struct fs_quota_statv)", unsafe.Sizeof(fsQuotaStatv{}), sizeofFsQuotaStatv},
		{"offsetof(fs_quota_statv, qs_pquota)", unsafe.Offsetof(fsQuotaStatv{}.Pquota), 56},
		{"offsetof(fs_quota_statv, qs_pad2)", unsafe.Offsetof(fsQuotaStatv{}.Pad2), 104},
		{"sizeof(struct if_dqinfo)", unsafe.Sizeof(ifDqinfo{}), sizeofIfDqinfo},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d; want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestRoundUp(t *testing.T) {
	for _, tc := range []struct {
		n, unit int64
		want    uint64
	}{
		{0, 512, 0}, {-5, 512, 0}, {1, 512, 1}, {512, 512, 1}, {513, 512, 2},
		{10 << 20, 512, 20480}, {10 << 20, 1024, 10240}, {1025, 1024, 2},
	} {
		if got := roundUp(tc.n, tc.unit); got != tc.want {
			t.Errorf("roundUp(%d, %d) = %d; want %d", tc.n, tc.unit, got, tc.want)
		}
	}
}
