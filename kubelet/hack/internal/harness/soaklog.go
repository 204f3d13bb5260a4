package harness

import (
	"bufio"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// The kubelet's log, read as it grows: the soak learns from it when the
// kubelet starts setting up a pod's volumes, when a SetUp or TearDown
// succeeded, and every failed TearDown with its error (kubelet v1.37.2's
// own lines, at --v=2).

// volumeEventKind is what a kubelet log line says about a volume.
type volumeEventKind int

const (
	eventMountStarted   volumeEventKind = iota // operationExecutor.MountVolume started
	eventSetUp                                 // MountVolume.SetUp succeeded
	eventTearDown                              // UnmountVolume.TearDown succeeded
	eventTearDownFailed                        // UnmountVolume.TearDown failed (one per failed operation: its retry line)
)

// volumeEvent is one such line.
type volumeEvent struct {
	Kind   volumeEventKind
	Time   time.Time // the line's klog time stamp
	Plugin string    // "kubernetes.io/empty-dir", "kubernetes.io/csi", …
	UID    string    // the pod's
	Volume string    // the volume's name in the pod
	Error  string    // a failure's error, after the kubelet's prefix
	Offset int64     // where the line starts in the log
}

var (
	// The mount lines are structured (InfoS): the message is quoted, its
	// quotes escaped.
	mountStartedLine = regexp.MustCompile(`operationExecutor\.MountVolume started for volume \\"[^"\\]*\\" \(UniqueName: \\"([^"\\]+)\\"\)`)
	setUpLine        = regexp.MustCompile(`MountVolume\.SetUp succeeded for volume \\"[^"\\]*\\" \(UniqueName: \\"([^"\\]+)\\"\)`)
	// The unmount lines are printf-style.
	tearDownLine       = regexp.MustCompile(`UnmountVolume\.TearDown succeeded for volume "([^"]+)"`)
	tearDownFailedLine = regexp.MustCompile(`UnmountVolume\.TearDown failed for volume "([^"]+)"`)
)

// podUIDLen is the length of a pod UID in the kubelet's unique volume
// names, <plugin>/<uid>-<volume>.
const podUIDLen = 36

// parseVolumeLine reads a kubelet log line; ok is false for a line that
// is none of the volumeEventKinds (or names no pod's volume). year is the
// year of the klog time stamp, which has none.
func parseVolumeLine(line string, year int) (ev volumeEvent, ok bool) {
	var m []string
	switch {
	case strings.Contains(line, "operationExecutor.MountVolume started"):
		m, ev.Kind = mountStartedLine.FindStringSubmatch(line), eventMountStarted
	case strings.Contains(line, "MountVolume.SetUp succeeded"):
		m, ev.Kind = setUpLine.FindStringSubmatch(line), eventSetUp
	case strings.Contains(line, "UnmountVolume.TearDown succeeded"):
		m, ev.Kind = tearDownLine.FindStringSubmatch(line), eventTearDown
	case strings.Contains(line, "UnmountVolume.TearDown failed") && retryLine.MatchString(line):
		m, ev.Kind = tearDownFailedLine.FindStringSubmatch(line), eventTearDownFailed
		if _, after, found := strings.Cut(line, "UnmountVolume.TearDown failed for volume"); found {
			if _, msg, found := strings.Cut(after, ") : "); found {
				ev.Error = strings.TrimSpace(msg)
			}
		}
	}
	if m == nil {
		return ev, false
	}
	i := strings.LastIndexByte(m[1], '/')
	if i < 0 || len(m[1]) < i+1+podUIDLen+2 || m[1][i+1+podUIDLen] != '-' {
		return ev, false
	}
	ev.Plugin, ev.UID, ev.Volume = m[1][:i], m[1][i+1:i+1+podUIDLen], m[1][i+2+podUIDLen:]
	t, err := klogTime(line)
	if err != nil {
		return ev, false
	}
	ev.Time = time.Date(year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.Local)
	return ev, true
}

// logFollower reads a growing log file line by line, from where it last
// stopped; a line still being written is read the next time.
type logFollower struct {
	path   string
	offset int64
}

// maxLogLine is the longest line handed on; longer ones (none of the
// lines the soak reads) are skipped.
const maxLogLine = 256 << 10

// next calls fn for every complete line added since the last call, with
// the line's offset.
func (f *logFollower) next(fn func(line string, offset int64)) error {
	file, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer file.Close()
	if _, err := file.Seek(f.offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(file, maxLogLine)
	for {
		line, err := r.ReadSlice('\n')
		long := int64(0)
		for errors.Is(err, bufio.ErrBufferFull) {
			long += int64(len(line))
			line, err = r.ReadSlice('\n')
		}
		if err != nil {
			return nil // EOF: a partial line waits for the next call
		}
		if long == 0 {
			fn(string(line[:len(line)-1]), f.offset)
		}
		f.offset += long + int64(len(line))
	}
}
