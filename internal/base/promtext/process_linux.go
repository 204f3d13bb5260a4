package promtext

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const processMetricsSupported = true

// userHZ is the unit of the times in /proc/self/stat (USER_HZ): 100 on
// every architecture Linux runs Go on, as client_golang's procfs assumes.
const userHZ = 100

// update reads the process's figures and sets the metrics; what cannot be
// read keeps its last value.
func (p *processMetrics) update() {
	if st, err := readSelfStat(); err == nil {
		p.cpu.Set(float64(st.utime+st.stime) / userHZ)
		p.vsize.Set(float64(st.vsize))
		p.rss.Set(float64(st.rss) * float64(os.Getpagesize()))
		if boot, err := bootTime(); err == nil {
			p.start.Set(float64(boot) + float64(st.starttime)/userHZ)
		}
	}
	if n, err := openFDs(); err == nil {
		p.openFDs.Set(float64(n))
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		p.maxFDs.Set(float64(lim.Cur))
	}
	if unix.Getrlimit(unix.RLIMIT_AS, &lim) == nil {
		p.maxVsize.Set(float64(lim.Cur))
	}
	if in, out, err := ipOctets(); err == nil {
		p.received.Set(in)
		p.sent.Set(out)
	}
}

// selfStat is what update uses of /proc/self/stat.
type selfStat struct {
	utime, stime, starttime, vsize uint64 // clock ticks, ticks, ticks since boot, bytes
	rss                            int64  // pages
}

// readSelfStat parses /proc/self/stat (proc(5)): the fields after the
// command name, which is in parentheses and may hold anything, spaces and
// parentheses included.
func readSelfStat() (selfStat, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return selfStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return selfStat{}, errors.New("/proc/self/stat: no command name")
	}
	// f[0] is field 3 (state): field n is f[n-3].
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 24-3+1 {
		return selfStat{}, errors.New("/proc/self/stat: too few fields")
	}
	var st selfStat
	var errs [5]error
	st.utime, errs[0] = strconv.ParseUint(f[14-3], 10, 64)
	st.stime, errs[1] = strconv.ParseUint(f[15-3], 10, 64)
	st.starttime, errs[2] = strconv.ParseUint(f[22-3], 10, 64)
	st.vsize, errs[3] = strconv.ParseUint(f[23-3], 10, 64)
	st.rss, errs[4] = strconv.ParseInt(f[24-3], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return selfStat{}, err
	}
	return st, nil
}

// bootTime is the btime line of /proc/stat: when the system booted, in
// seconds since the epoch.
func bootTime() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("/proc/stat: no btime")
}

// openFDs counts this process's open descriptors: the size of
// /proc/self/fd, which is their number since Linux 6.2, or else its
// entries.
func openFDs() (int, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/fd", &st); err != nil {
		return 0, err
	}
	if st.Size > 0 {
		return int(st.Size), nil
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(1024)
		n += len(names)
		if errors.Is(err, io.EOF) {
			// The directory's own descriptor is not one the process had.
			return n - 1, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// ipOctets are the InOctets and OutOctets of /proc/self/net/netstat's
// IpExt lines: the bytes the network namespace of this process received
// and sent over IP. A field that is missing is 0, as client_golang has it.
func ipOctets() (in, out float64, err error) {
	b, err := os.ReadFile("/proc/self/net/netstat")
	if err != nil {
		return 0, 0, err
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "IpExt:")
		if !ok {
			continue
		}
		if names == nil {
			names = strings.Fields(rest)
			continue
		}
		for i, v := range strings.Fields(rest) {
			if i >= len(names) {
				break
			}
			switch names[i] {
			case "InOctets":
				in, err = strconv.ParseFloat(v, 64)
			case "OutOctets":
				out, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				return 0, 0, err
			}
		}
		return in, out, nil
	}
	return 0, 0, nil
}
