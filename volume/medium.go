package volume

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nodevol/nodevol/internal/base/memsize"
)

// StorageMedium is an emptyDir medium, as in the Kubernetes API: "" (the
// node's disk), "Memory", "HugePages" or "HugePages-<size>" (e.g.
// "HugePages-2Mi").
type StorageMedium string

// The emptyDir media.
const (
	StorageMediumDefault   StorageMedium = ""
	StorageMediumMemory    StorageMedium = "Memory"
	StorageMediumHugePages StorageMedium = "HugePages"
	// StorageMediumHugePagesPrefix starts a medium with an explicit page
	// size: "HugePages-2Mi".
	StorageMediumHugePagesPrefix StorageMedium = "HugePages-"
)

// IsHugePages reports whether m is HugePages or HugePages-<size>.
func (m StorageMedium) IsHugePages() bool {
	return m == StorageMediumHugePages || strings.HasPrefix(string(m), string(StorageMediumHugePagesPrefix))
}

// Medium is the kind of storage behind an emptyDir volume: a
// StorageMedium without its hugepage size. It reads and writes as its
// name ("Default", "Memory", "HugePages") in text and JSON, which is how
// emptyDir's metadata file and nodevol's reports record it.
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

// MarshalText writes the medium's name.
func (m Medium) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a medium's name; "" is Default.
func (m *Medium) UnmarshalText(b []byte) error {
	switch string(b) {
	case "Default", "":
		*m = MediumDefault
	case "Memory":
		*m = MediumMemory
	case "HugePages":
		*m = MediumHugePages
	default:
		return fmt.Errorf("unknown medium %q", b)
	}
	return nil
}

// StorageMedium is the API medium for m: "" for Default, and for
// HugePages "HugePages-<size>" when the page size is known (positive),
// else plain "HugePages".
func (m Medium) StorageMedium(hugePageSize int64) StorageMedium {
	switch m {
	case MediumMemory:
		return StorageMediumMemory
	case MediumHugePages:
		if hugePageSize > 0 {
			return StorageMediumHugePagesPrefix + StorageMedium(FormatQuantity(hugePageSize))
		}
		return StorageMediumHugePages
	}
	return StorageMediumDefault
}

// ParseQuantity parses a size in bytes the way the kernel's memparse does
// for mount options: a decimal number with an optional K, M, G, T, P or E
// suffix (either case, powers of 1024). An "i" or "iB" after the suffix,
// as in Kubernetes quantities ("2Mi"), is accepted too.
func ParseQuantity(s string) (int64, error) { return memsize.Parse(s) }

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
