package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moby/sys/mountinfo"
)

// printReport prints the result table, the failures, and the timings.
func printReport(w io.Writer, res *innerResult, wall time.Duration) {
	if len(res.Rows) == 0 {
		fmt.Fprintf(w, "no results; e2e wall time %.1fs\n", wall.Seconds())
		return
	}
	fmt.Fprintln(w)
	for _, f := range flavors {
		fmt.Fprintf(w, "%s kubelet: %s\n", f, res.Versions[f.String()])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tKUBELET\tEXPECTED\tOBSERVED\tVERDICT")
	for _, r := range res.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Kubelet, r.Expected, r.Observed, verdict(r))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, r := range res.Rows {
		for _, d := range r.Details {
			fmt.Fprintf(w, "%s %s: %s\n", r.Scenario, r.Kubelet, d)
		}
		for _, f := range r.Failures {
			fmt.Fprintf(w, "%s %s: ✗ %s\n", r.Scenario, r.Kubelet, f)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "TIMINGS (seconds)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cols := timingColumns(res.Rows)
	fmt.Fprintf(tw, "SCENARIO\tSTEP\t%s\n", strings.ToUpper(strings.Join(cols, "\t")))
	for _, t := range timingTable(res.Rows) {
		cells := []string{t.scenario, t.step}
		for _, c := range cols {
			cells = append(cells, t.by[c])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "e2e wall time %.1fs\n", wall.Seconds())
}

// ErrMountsInWorkdir is matched by the error of removeWorkdir when the
// host has a mount under the workdir: it is never removed then.
var ErrMountsInWorkdir = errors.New("mounts under the workdir on the host")

// removeWorkdir removes the run's temporary directory once the host's
// mount table shows nothing mounted below it: with the namespace gone,
// nothing should be, and a plain RemoveAll would otherwise do exactly what
// this test is about.
func removeWorkdir(dir string) error {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	if len(ms) > 0 {
		var points []string
		for _, m := range ms {
			points = append(points, m.Mountpoint)
		}
		return fmt.Errorf("%w: %s; not removing %s", ErrMountsInWorkdir, strings.Join(points, ", "), dir)
	}
	return os.RemoveAll(dir)
}

// timingColumns are the kubelet columns of the timing table: stock and
// nodevol, then the switches' ("stock→nodevol") when there are any.
func timingColumns(rows []row) []string {
	cols := []string{stockKubelet.String(), nodevolKubelet.String()}
	for _, r := range rows {
		if !slices.Contains(cols, r.Kubelet) {
			cols = append(cols, r.Kubelet)
		}
	}
	return cols
}

// timingRow is one step of one scenario, timed for each kubelet.
type timingRow struct {
	scenario, step string
	by             map[string]string // kubelet -> seconds
}

// timingTable puts the rows' timings side by side, in the order first seen.
func timingTable(rows []row) []*timingRow {
	var out []*timingRow
	index := map[string]*timingRow{}
	for _, r := range rows {
		for _, t := range r.Timings {
			key := r.Scenario + "\x00" + t.Step
			tr := index[key]
			if tr == nil {
				tr = &timingRow{scenario: r.Scenario, step: t.Step, by: map[string]string{}}
				index[key] = tr
				out = append(out, tr)
			}
			tr.by[r.Kubelet] = fmt.Sprintf("%.3f", t.Duration.Seconds())
		}
	}
	return out
}
