package mountdetect

import (
	"fmt"
	"strings"

	"github.com/nodevol/nodevol/internal/base/memsize"
)

// Statfs magic numbers (f_type) for the filesystems nodevol cares about.
// They are compared as uint32 because Statfs_t.Type is int32 on some
// 32-bit platforms and int64 on others, and hugetlbfs' magic does not fit
// in an int32.
const (
	MagicTmpfs     uint32 = 0x01021994
	MagicHugetlbfs uint32 = 0x958458f6
)

var magicNames = map[uint32]string{
	MagicTmpfs:     "tmpfs",
	MagicHugetlbfs: "hugetlbfs",
	0xef53:         "ext4", // ext2/ext3/ext4 share the magic
	0x58465342:     "xfs",
	0x9123683e:     "btrfs",
	0x6969:         "nfs",
	0x794c7630:     "overlay",
	0x9fa0:         "proc",
	0x62656572:     "sysfs",
	0xff534d42:     "cifs",
	0xfe534d42:     "smb2",
	0x65735546:     "fuse",
	0x2fc12fc1:     "zfs",
	0x858458f6:     "ramfs",
	0x73717368:     "squashfs",
	0x63677270:     "cgroup2",
	0x27e0eb:       "cgroup",
	0x1cd1:         "devpts",
	0x00c36400:     "ceph",
	0x4d44:         "vfat",
	0xf2f52010:     "f2fs",
	0x01021997:     "9p",
	0x6e736673:     "nsfs",
	0x42494e4d:     "binfmt_misc",
	0x64626720:     "debugfs",
	0x74726163:     "tracefs",
	0xcafe4a11:     "bpf",
	0x73636673:     "securityfs",
}

// FSTypeName names a statfs magic number.
func FSTypeName(magic uint32) string {
	if n, ok := magicNames[magic]; ok {
		return n
	}
	return fmt.Sprintf("unknown(0x%x)", magic)
}

// ParseHugePageSize finds the pagesize= option in a comma-separated mount
// option string (as in /proc/self/mountinfo, e.g. "rw,relatime,pagesize=2M")
// and returns the size in bytes, read as the kernel's memparse reads it
// (K, M, G, ... are powers of 1024; "2Mi" is accepted too). ok is false when there is no pagesize
// option; err is set when there is one and it does not parse.
func ParseHugePageSize(options string) (size int64, ok bool, err error) {
	for opt := range strings.SplitSeq(options, ",") {
		v, found := strings.CutPrefix(opt, "pagesize=")
		if !found {
			continue
		}
		size, err := memsize.Parse(v)
		if err != nil {
			return 0, true, fmt.Errorf("mount option %q: %w", opt, err)
		}
		return size, true, nil
	}
	return 0, false, nil
}
