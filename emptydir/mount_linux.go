package emptydir

import (
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// kernelSupportsNoswap reports whether tmpfs takes the noswap option
// (Linux 6.3 and later).
var kernelSupportsNoswap = sync.OnceValue(func() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 3)
})

// releaseAtLeast parses "6.18.44-fc" style kernel releases.
func releaseAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err := strconv.Atoi(parts[0])
	if err != nil {
		return false
	}
	minStr := parts[1]
	for i, c := range minStr {
		if c < '0' || c > '9' {
			minStr = minStr[:i]
			break
		}
	}
	mn, err := strconv.Atoi(minStr)
	if err != nil {
		return false
	}
	return maj > major || (maj == major && mn >= minor)
}
