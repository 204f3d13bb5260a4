package cli

import (
	"fmt"
	"io"

	"github.com/nodevol/nodevol/fsquota"
	"github.com/nodevol/nodevol/mountdetect"
)

// usageResult is what "nodevol usage" reports about one path. The exported
// fields are the --json output, one object per line.
type usageResult struct {
	Path      string `json:"path"`
	Bytes     int64  `json:"bytes"`
	Inodes    int64  `json:"inodes"`
	Source    string `json:"source"` // "quota" or "walk"; "" on error
	ProjectID uint32 `json:"projectID"`
	// NotCounted are the mount points beneath the directory whose mounts
	// the walk did not count (another mount's data is not the
	// directory's). The walk asks nothing of those mounts, so only their
	// paths are known. Never nil: [] in JSON.
	NotCounted []string `json:"notCounted"`
	// UpperBound: the walk met more hard-linked files than it remembers,
	// and counted those past them at every link.
	UpperBound bool `json:"upperBound,omitempty"`
	failureJSON

	why string // why the quota was not used, when it was not
	err error
}

func (r *usageResult) setErr(err error) {
	r.err = err
	r.record(err)
}

// measure reports path's usage, as fsquota's DirUsage measures it: from
// its project quota when the directory carries a project ID and the
// kernel accounts for it, otherwise from a walk that stays on the
// directory's mount and counts hard links once.
func measure(q *fsquota.Manager, path string) usageResult {
	r := usageResult{Path: path, NotCounted: []string{}}
	if err := refuseDotDot(path); err != nil {
		r.setErr(err)
		return r
	}
	u, err := q.DirUsage(path)
	r.ProjectID = u.ProjectID
	if err != nil {
		r.setErr(err)
		return r
	}
	r.Bytes, r.Inodes, r.Source = u.Bytes, u.Inodes, u.Source.String()
	for _, m := range u.Skipped {
		r.NotCounted = append(r.NotCounted, m.MountPoint)
	}
	r.UpperBound = u.UpperBound
	if u.NoQuota != nil {
		r.why = u.NoQuota.Error()
	}
	return r
}

// usageHelp is the help of "nodevol usage", after its usage line. A
// constant, not a fmt.Sprintf made at every start of every command:
// TestUsageHelpSaysTheBound keeps its number mountdetect.MaxHardLinkedInodes.
const usageHelp = `Report, for each directory, the bytes and inodes it uses and where the
numbers came from: "quota" when the directory carries an XFS/ext4 project ID
and the kernel accounts for it, otherwise "walk" — a walk that stays on the
directory's mount (mounts beneath it are not counted) and counts hard-linked
files once, as long as it can remember them: past 98304 hard-linked files the
numbers are an upper bound, and say so. Also the directory's project ID (0
when none). Nothing is changed.

Exit status: 0 every path measured, 2 some path could not be measured or bad
usage.`

func runUsage(fs *flagSet, args []string, stdout, stderr io.Writer) int {
	asJSON := fs.Bool("json", false, "print one JSON object per path per line")
	paths, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(paths) == 0 {
		return usageError(fs, stderr, "no PATH given")
	}
	q := fsquota.New() // reads usage only: the bookkeeping files are not written
	enc := newJSONEncoder(stdout)
	code = ExitOK
	for _, p := range paths {
		r := measure(q, p)
		if r.err != nil {
			code = ExitError
		}
		if *asJSON {
			if err := enc.Encode(&r); err != nil {
				fmt.Fprintf(stderr, "nodevol usage: write report: %v\n", err)
				return ExitError
			}
			continue
		}
		if r.err != nil {
			writeErrors(stderr, "nodevol usage: "+display(p)+": ", r.err, "")
			continue
		}
		atMost := ""
		if r.UpperBound {
			atMost = "at most "
		}
		fmt.Fprintf(stdout, "%s\n  used:       %s%s (%d bytes), %d inodes\n  source:     %s", display(p), atMost, humanBytes(r.Bytes), r.Bytes, r.Inodes, r.Source)
		if r.Source == "walk" && r.why != "" {
			fmt.Fprintf(stdout, " (%s)", display(r.why))
		}
		fmt.Fprintf(stdout, "\n  project ID: %d\n", r.ProjectID)
		if r.UpperBound {
			fmt.Fprintf(stdout, "  upper bound: more than %d hard-linked files; those past them are counted at every link\n", mountdetect.MaxHardLinkedInodes)
		}
		for _, m := range r.NotCounted {
			fmt.Fprintf(stdout, "  not counted: %s (another mount)\n", display(m))
		}
	}
	return code
}

// humanBytes prints a byte count with a binary unit: 1536 → "1.5 KiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
