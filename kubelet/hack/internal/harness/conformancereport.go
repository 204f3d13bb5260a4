package harness

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// specOutcome is one selected spec's state on each kubelet ("" when that
// kubelet's run did not report it).
type specOutcome struct {
	Text  string
	File  string // relative to k8s.io/kubernetes
	By    map[string]suiteSpec
	Order int
}

// outcomes lines the runs' specs up by text, in the dry run's order.
func (r *conformanceResult) outcomes() []specOutcome {
	out := make([]specOutcome, len(r.Selected))
	idx := map[string]int{}
	for i, s := range r.Selected {
		out[i] = specOutcome{Text: s.Text, File: relFile(s.File), By: map[string]suiteSpec{}, Order: i}
		idx[s.Text] = i
	}
	for _, run := range r.Runs {
		for _, s := range run.Specs {
			if i, ok := idx[s.Text]; ok {
				out[i].By[run.Kubelet] = s
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Order < out[j].Order
	})
	return out
}

// relFile is file from "test/e2e/", as the selection names it.
func relFile(file string) string {
	if i := strings.Index(file, "test/e2e/"); i >= 0 {
		return file[i:]
	}
	return file
}

// counts is how many of the run's specs are in each state.
func (run conformanceRun) counts() map[string]int {
	c := map[string]int{}
	for _, s := range run.Specs {
		c[s.State]++
	}
	return c
}

// conformanceProblems is why the run is not a pass: a nodevol spec that
// did not pass (failed, or anything but passed where the stock kubelet
// passed it), a selected spec a run did not report, a run that did not
// finish. Specs the stock kubelet fails are recorded, not problems, as
// long as nodevol passes them; specs the suite skipped on both (a reason
// in the table) are listed, never counted as passed.
func conformanceProblems(r *conformanceResult) []string {
	var problems []string
	for _, run := range r.Runs {
		if run.Error != "" {
			problems = append(problems, fmt.Sprintf("%s run: %s", run.Kubelet, run.Error))
		}
	}
	for _, o := range r.outcomes() {
		for _, run := range r.Runs {
			s, ok := o.By[run.Kubelet]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: not reported by the %s run", o.Text, run.Kubelet))
			case run.Kubelet == nodevolKubelet.String() && s.State != "passed" && s.State != "skipped":
				problems = append(problems, fmt.Sprintf("%s: %s on nodevol: %s", o.Text, s.State, firstLine(s.Message)))
			case run.Kubelet == nodevolKubelet.String() && s.State == "skipped" && o.By[stockKubelet.String()].State == "passed":
				problems = append(problems, fmt.Sprintf("%s: skipped on nodevol, passed on stock: %s", o.Text, firstLine(s.Message)))
			}
		}
	}
	return problems
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// printConformance prints each run's totals, the specs that did not pass
// somewhere, the problems, and the per-spec table in Markdown (what
// docs/conformance.md records).
func printConformance(w io.Writer, r *conformanceResult, wall time.Duration) {
	fmt.Fprintln(w)
	var names []string
	for k := range r.Versions {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(w, "%s: %s\n", k, r.Versions[k])
	}
	fmt.Fprintf(w, "\n%d specs selected (e2e.test --ginkgo.dry-run)\n", len(r.Selected))
	for _, run := range r.Runs {
		c := run.counts()
		fmt.Fprintf(w, "%s kubelet: %d passed, %d failed, %d skipped, %d other; suite %.0fs, namespaces gone %.1fs later; reports in %s\n",
			run.Kubelet, c["passed"], c["failed"], c["skipped"], len(run.Specs)-c["passed"]-c["failed"]-c["skipped"], run.Seconds, run.NamespacesGoneSeconds, run.ReportDir)
		if run.Error != "" {
			fmt.Fprintf(w, "  run error: %s\n", run.Error)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, markdownConformanceTable(r))
	for _, o := range r.outcomes() {
		for _, run := range r.Runs {
			if s, ok := o.By[run.Kubelet]; ok && s.State != "passed" {
				fmt.Fprintf(w, "%s on %s: %s: %s\n", o.Text, run.Kubelet, s.State, firstLine(s.Message))
			}
		}
	}
	problems := conformanceProblems(r)
	for _, p := range problems {
		fmt.Fprintf(w, "✗ %s\n", p)
	}
	has := func(f flavor) bool {
		return slices.ContainsFunc(r.Runs, func(run conformanceRun) bool { return run.Kubelet == f.String() })
	}
	var verdict string
	switch {
	case len(problems) > 0:
		verdict = fmt.Sprintf("FAIL: %d problems", len(problems))
	case !has(nodevolKubelet):
		verdict = "recorded (no nodevol run)"
	case has(stockKubelet):
		verdict = "PASS: nodevol passed every spec the stock kubelet passed, with no failure"
	default:
		verdict = "PASS: nodevol passed every selected spec the suite ran, with no failure (no stock run to compare)"
	}
	fmt.Fprintf(w, "%s\ne2e wall time %.1fs\n", verdict, wall.Seconds())
}

// markdownConformanceTable is the per-spec table: file, spec, and each
// run's state and seconds.
func markdownConformanceTable(r *conformanceResult) string {
	var b strings.Builder
	b.WriteString("| file | spec |")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, " %s |", run.Kubelet)
	}
	b.WriteString("\n|---|---|")
	for range r.Runs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, o := range r.outcomes() {
		text := strings.TrimPrefix(o.Text, "[sig-storage] ")
		fmt.Fprintf(&b, "| %s | %s |", strings.TrimPrefix(o.File, "test/e2e/"), strings.ReplaceAll(text, "|", `\|`))
		for _, run := range r.Runs {
			s, ok := o.By[run.Kubelet]
			switch {
			case !ok:
				b.WriteString(" not reported |")
			default:
				fmt.Fprintf(&b, " %s %.1fs |", s.State, s.Seconds)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
