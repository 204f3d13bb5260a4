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

// FSTypeName names a statfs magic number. A switch, not a map: a map
// literal is built at every start of every program that links this
// package (docs/benchmarks.md, "Start time").
func FSTypeName(magic uint32) string {
	switch magic {
	case MagicTmpfs:
		return "tmpfs"
	case MagicHugetlbfs:
		return "hugetlbfs"
	case 0xef53:
		return "ext4" // ext2/ext3/ext4 share the magic
	case 0x58465342:
		return "xfs"
	case 0x9123683e:
		return "btrfs"
	case 0x6969:
		return "nfs"
	case 0x794c7630:
		return "overlay"
	case 0x9fa0:
		return "proc"
	case 0x62656572:
		return "sysfs"
	case 0xff534d42:
		return "cifs"
	case 0xfe534d42:
		return "smb2"
	case 0x65735546:
		return "fuse"
	case 0x2fc12fc1:
		return "zfs"
	case 0x858458f6:
		return "ramfs"
	case 0x73717368:
		return "squashfs"
	case 0x63677270:
		return "cgroup2"
	case 0x27e0eb:
		return "cgroup"
	case 0x1cd1:
		return "devpts"
	case 0x00c36400:
		return "ceph"
	case 0x4d44:
		return "vfat"
	case 0xf2f52010:
		return "f2fs"
	case 0x01021997:
		return "9p"
	case 0x6e736673:
		return "nsfs"
	case 0x42494e4d:
		return "binfmt_misc"
	case 0x64626720:
		return "debugfs"
	case 0x74726163:
		return "tracefs"
	case 0xcafe4a11:
		return "bpf"
	case 0x73636673:
		return "securityfs"
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
