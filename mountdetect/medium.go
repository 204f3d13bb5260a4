package mountdetect

import (
	"fmt"
	"strconv"
	"strings"
)

// Medium is the storage medium of an emptyDir volume, as the kubelet names
// it (v1.StorageMedium), with "Default" for the empty medium.
type Medium int

const (
	// MediumDefault is a directory on the node's filesystem.
	MediumDefault Medium = iota
	// MediumMemory is a tmpfs mount.
	MediumMemory
	// MediumHugePages is a hugetlbfs mount.
	MediumHugePages
)

func (m Medium) String() string {
	switch m {
	case MediumDefault:
		return "Default"
	case MediumMemory:
		return "Memory"
	case MediumHugePages:
		return "HugePages"
	}
	return "Medium(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText makes Medium print as its name in JSON.
func (m Medium) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

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

// MediumForMagic maps a filesystem magic to the emptyDir medium it stands
// for when the directory is the root of such a mount.
func MediumForMagic(magic uint32) Medium {
	switch magic {
	case MagicTmpfs:
		return MediumMemory
	case MagicHugetlbfs:
		return MediumHugePages
	}
	return MediumDefault
}

// ParseHugePageSize finds the pagesize= option in a comma-separated mount
// option string (as in /proc/self/mountinfo, e.g. "rw,relatime,pagesize=2M")
// and returns the size in bytes. ok is false when there is no pagesize
// option; err is set when there is one and it does not parse.
func ParseHugePageSize(options string) (size int64, ok bool, err error) {
	for opt := range strings.SplitSeq(options, ",") {
		v, found := strings.CutPrefix(opt, "pagesize=")
		if !found {
			continue
		}
		size, err := ParseMemSize(v)
		if err != nil {
			return 0, true, fmt.Errorf("mount option %q: %w", opt, err)
		}
		return size, true, nil
	}
	return 0, false, nil
}

// ParseMemSize parses a size the way the kernel's memparse does for mount
// options: a decimal number with an optional K, M, G, T, P or E suffix
// (either case, powers of 1024). An "i" or "iB" after the suffix, as in
// Kubernetes quantities ("2Mi"), is accepted too.
func ParseMemSize(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q does not start with a number", s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	suffix := strings.ToUpper(s[i:])
	if binary, ok := strings.CutSuffix(suffix, "I"); ok && binary != "" {
		suffix = binary
	} else if binary, ok := strings.CutSuffix(suffix, "IB"); ok && binary != "" {
		suffix = binary
	}
	shift := 0
	switch suffix {
	case "":
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	case "P":
		shift = 50
	case "E":
		shift = 60
	default:
		return 0, fmt.Errorf("size %q has unknown suffix %q", s, s[i:])
	}
	if n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("size %q overflows", s)
	}
	return n << shift, nil
}

// FormatQuantity prints a byte count the way Kubernetes prints binary
// quantities: 2097152 → "2Mi", 1073741824 → "1Gi", 1000 → "1000".
func FormatQuantity(n int64) string {
	if n == 0 {
		return "0"
	}
	units := []string{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	u := 0
	for u < len(units)-1 && n%1024 == 0 {
		n /= 1024
		u++
	}
	return strconv.FormatInt(n, 10) + units[u]
}
