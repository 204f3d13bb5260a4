// Package memsize parses sizes the way the kernel's memparse does, for
// the two places nodevol reads them: hugetlbfs' pagesize= mount option
// (mountdetect) and Kubernetes binary quantities such as the size in an
// emptyDir medium "HugePages-2Mi" (volume). One parser serves both, so a
// size reads the same wherever it comes from.
package memsize

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse parses a decimal number with an optional K, M, G, T, P or E
// suffix (either case, powers of 1024). An "i" or "iB" after the suffix,
// as in Kubernetes quantities ("2Mi"), is accepted too.
func Parse(s string) (int64, error) {
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
