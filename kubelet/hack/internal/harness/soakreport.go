package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// soakResult is the soak's outcome, handed back by the namespace's PID 1.
type soakResult struct {
	Params        soakParams       `json:"params"`
	Command       string           `json:"command"`
	PodsPlanned   int              `json:"podsPlanned"`
	Nodes         []soakNodeResult `json:"nodes"`
	Faults        []faultResult    `json:"faults"`
	Samples       []resourceSample `json:"samples"`
	Growth        []growth         `json:"growth"`
	Violations    []violation      `json:"violations"`
	ChurnSeconds  float64          `json:"churnSeconds"` // from the first pod's creation until every pod was gone
	DrainSeconds  float64          `json:"drainSeconds"` // the DaemonSets' deletion and the leak checks
	LivenessBound time.Duration    `json:"livenessBound"`
	RunBound      time.Duration    `json:"runBound"`
}

// soakNodeResult is one node's figures.
type soakNodeResult struct {
	Name    string `json:"name"`
	Flavor  string `json:"flavor"`
	Version string `json:"version"`
	// Lives is how many kubelet processes the node had (1 + the SIGKILLs).
	Lives int       `json:"lives"`
	Stats nodeStats `json:"stats"`
}

// result gathers the figures.
func (s *soak) result(churn, drain time.Duration) *soakResult {
	res := &soakResult{Params: s.in.Params, Command: s.in.Command, PodsPlanned: len(s.sched.Pods),
		ChurnSeconds: churn.Seconds(), DrainSeconds: drain.Seconds(), LivenessBound: s.in.LivenessBound, RunBound: s.in.RunBound}
	growth := s.checkGrowth()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		n.mu.Lock()
		lives := len(n.lives)
		n.mu.Unlock()
		var st nodeStats
		n.count(func(s *nodeStats) { st = *s })
		res.Nodes = append(res.Nodes, soakNodeResult{Name: n.name, Flavor: n.flavor.String(), Version: n.version, Lives: lives, Stats: st})
	}
	res.Faults = slices.Clone(s.faultsDone)
	res.Samples = slices.Clone(s.samples)
	res.Growth = growth
	res.Violations = slices.Clone(s.violations)
	return res
}

// percentiles summarises durations in seconds: nearest-rank p50 and p99,
// and the max.
type percentiles struct {
	N             int
	P50, P99, Max float64
}

func percentilesOf(xs []float64) percentiles {
	if len(xs) == 0 {
		return percentiles{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return percentiles{N: len(s), P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1]}
}

func (p percentiles) String() string {
	if p.N == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f (%d)", p.P50, p.P99, p.Max, p.N)
}

// printSoak prints the result as markdown tables: what docs/reliability.md
// shows.
func printSoak(w io.Writer, r *soakResult, wall time.Duration) {
	fmt.Fprintf(w, "\n## Soak: seed %d, %v of churn at %g pods/min on %d nodes\n\n", r.Params.Seed, r.Params.Duration, r.Params.Rate, len(r.Nodes))
	fmt.Fprintf(w, "Command: `%s`\n\n", r.Command)
	var head []string
	for _, n := range r.Nodes {
		head = append(head, fmt.Sprintf("%s (%s)", n.Name, n.Flavor))
		fmt.Fprintf(w, "- %s: %s kubelet, %s; %d kubelet processes\n", n.Name, n.Flavor, n.Version, n.Lives)
	}
	fmt.Fprintf(w, "- %d pods planned; churn %.0f s (until every pod was gone), drain and leak checks %.0f s; wall time %.0f s\n",
		r.PodsPlanned, r.ChurnSeconds, r.DrainSeconds, wall.Seconds())
	if !r.Params.HugePages {
		fmt.Fprintln(w, "- HugePages volumes: none (the nodes had no 4 MiB of huge pages to give: see -hugepages)")
	}
	table := func(title string, rows [][]string) {
		fmt.Fprintf(w, "\n%s\n\n| | %s |\n|---|%s\n", title, strings.Join(head, " | "), strings.Repeat("---|", len(head)))
		for _, row := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
	per := func(label string, f func(st *nodeStats) string) []string {
		row := []string{label}
		for i := range r.Nodes {
			row = append(row, f(&r.Nodes[i].Stats))
		}
		return row
	}
	d := func(f func(st *nodeStats) int) func(st *nodeStats) string {
		return func(st *nodeStats) string { return fmt.Sprint(f(st)) }
	}
	table("### Pods", [][]string{
		per("created through the API", d(func(st *nodeStats) int { return st.PodsCreated })),
		per("ran (Running, every container)", d(func(st *nodeStats) int { return st.PodsRan })),
		per("deleted", d(func(st *nodeStats) int { return st.PodsDeleted })),
		per("gone from the API and the node", d(func(st *nodeStats) int { return st.PodsGone })),
		per("deleted as the kubelet began their SetUp (deletion before every SetUp succeeded)", func(st *nodeStats) string {
			return fmt.Sprintf("%d (%d)", st.SetUpDeletes, st.SetUpDeletesDuring)
		}),
	})
	leaks := map[string]int{}
	for _, v := range r.Violations {
		if v.Kind == violLeak {
			leaks[v.Node]++
		}
	}
	row := []string{"leaks after the drain (mounts, directories, sockets, quota projects, cgroups, processes, containers, addresses) / shims containerd orphaned in its restarts (containerd's)"}
	for _, n := range r.Nodes {
		row = append(row, fmt.Sprintf("%d / %d", leaks[n.Name], len(n.Stats.ContainerdOrphans)))
	}
	table("### After the drain", [][]string{row})
	var vrows [][]string
	for _, t := range volumeTypes {
		if t == volHugePages && !r.Params.HugePages {
			continue
		}
		vrows = append(vrows, per(string(t), func(st *nodeStats) string {
			c := st.Volumes[t]
			if c == nil {
				return "—"
			}
			return fmt.Sprintf("%d / %d / %d / %d", c.Planned, c.SetUp, c.TornDown, c.TearDownFailed)
		}))
	}
	table("### Volumes (in the pods created / SetUp succeeded / TearDown succeeded / TearDown failed; by the kubelet's log, subPath by the pods)", vrows)
	table("### NAS mounts and their sentinels", [][]string{
		per("NAS mounted (tmpfs, bind of a host directory)", func(st *nodeStats) string {
			return fmt.Sprintf("%d (%d, %d)", st.NASMounted, st.NASByKind[nasTmpfs.String()], st.NASByKind[nasBind.String()])
		}),
		per("in volume types", func(st *nodeStats) string {
			var parts []string
			for _, t := range volumeTypes {
				if st.NASByType[t] > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", t, st.NASByType[t]))
				}
			}
			return strings.Join(parts, ", ")
		}),
		per("sentinel files written", d(func(st *nodeStats) int { return st.SentinelFiles })),
		per("sentinel files checked (sha256: after every TearDown attempt, before each unmount, a bind's host directory after it)", d(func(st *nodeStats) int { return st.SentinelChecks })),
		per("files lost or changed", d(func(st *nodeStats) int { return st.FilesLost })),
		per("bytes lost", func(st *nodeStats) string {
			var parts []string
			for _, t := range volumeTypes {
				if st.BytesLostByType[t] > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", t, st.BytesLostByType[t]))
				}
			}
			if len(parts) == 0 {
				return fmt.Sprint(st.BytesLost)
			}
			return fmt.Sprintf("%d (%s)", st.BytesLost, strings.Join(parts, ", "))
		}),
		per("failed TearDowns of the soak's volumes: a NAS in the way / after a fault / the kernel's EBUSY, retried / none of these", func(st *nodeStats) string {
			return fmt.Sprintf("%d / %d / %d / %d", st.FailedNAS, st.FailedFault, st.FailedBusy, st.FailedUnexplained)
		}),
	})
	lat := func(f func(st *nodeStats) []float64) func(st *nodeStats) string {
		return func(st *nodeStats) string { return percentilesOf(f(st)).String() }
	}
	table("### Latency, seconds: p50 / p99 / max (pods)", [][]string{
		per("creation → Running", lat(func(st *nodeStats) []float64 { return st.CreationToRunning })),
		per("deletion → volumes gone (pods without a NAS)", lat(func(st *nodeStats) []float64 { return st.DeletionToVolumesGone })),
		per("deletion → pod directory gone (without a NAS)", lat(func(st *nodeStats) []float64 { return st.DeletionToPodDirGone })),
		per("deletion → gone from the API (without a NAS)", lat(func(st *nodeStats) []float64 { return st.DeletionToAPIGone })),
		per("NAS unmounted → volumes gone (pods with a NAS)", lat(func(st *nodeStats) []float64 { return st.UnmountToVolumesGone })),
	})
	table("### Metrics against the mount table and the log", [][]string{
		per("exporter's nodevol_scan_danger_volumes: checks / wrong for a moment (a scan during a teardown) / wrong for 25 s", func(st *nodeStats) string {
			return fmt.Sprintf("%d / %d / %d", st.DangerChecks, st.DangerLagged, st.DangerMismatches)
		}),
		per("kubelet's failed-unmount counter: checks / wrong", func(st *nodeStats) string {
			return fmt.Sprintf("%d / %d", st.UnmountCounterChecks, st.UnmountCounterMismatches)
		}),
	})
	printFaults(w, r)
	printResources(w, r)
	fmt.Fprintf(w, "\n### Violations\n\n")
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "None: no byte lost, nothing leaked, every pod gone within its bound, resources bounded, metrics true.")
		return
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "- at %.0fs %s %s [%s] %s\n", v.At, v.Node, v.Pod, v.Kind, v.Detail)
	}
	fmt.Fprintf(w, "\n%d violations. Replay the schedule: %s\n", len(r.Violations), r.Command)
}

// printFaults prints the faults injected per kind.
func printFaults(w io.Writer, r *soakResult) {
	fmt.Fprintf(w, "\n### Faults\n\n| kind | injected | recovery p50 / max (s) | not recovered |\n|---|---|---|---|\n")
	for _, k := range faultKinds {
		if k == faultDeleteInSetUp {
			n, during := 0, 0
			for _, nd := range r.Nodes {
				n += nd.Stats.SetUpDeletes
				during += nd.Stats.SetUpDeletesDuring
			}
			fmt.Fprintf(w, "| %s | %d (%d before every SetUp succeeded) | — | — |\n", k, n, during)
			continue
		}
		var rec []float64
		failed := 0
		for _, f := range r.Faults {
			if f.Plan.Kind != k {
				continue
			}
			rec = append(rec, f.Recovery)
			if f.Error != "" {
				failed++
			}
		}
		p := percentilesOf(rec)
		fmt.Fprintf(w, "| %s | %d | %s | %d |\n", k, p.N, map[bool]string{true: "—", false: fmt.Sprintf("%.1f / %.1f", p.P50, p.Max)}[p.N == 0], failed)
	}
}

// printResources prints the resources over time (at most about a dozen
// rows, and the last: after the drain) and their growth.
func printResources(w io.Writer, r *soakResult) {
	type col struct{ node, comp string }
	var cols []col
	for _, n := range r.Nodes {
		for _, c := range []string{compKubelet, compCSI, compExporter} {
			cols = append(cols, col{n.Name, c})
		}
	}
	var times []float64
	for _, s := range r.Samples {
		if !slices.Contains(times, s.At) {
			times = append(times, s.At)
		}
	}
	slices.Sort(times)
	if len(times) == 0 {
		return
	}
	step := max(1, (len(times)+11)/12)
	var shown []float64
	for i := 0; i < len(times); i += step {
		shown = append(shown, times[i])
	}
	if shown[len(shown)-1] != times[len(times)-1] {
		shown = append(shown, times[len(times)-1])
	}
	fmt.Fprintf(w, "\n### Resources over time: RSS MiB / open descriptors / goroutines (— not exported)\n\n| min | pods churned |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s %s |", c.node, c.comp)
	}
	fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("---|", len(cols)))
	for _, t := range shown {
		churned := 0
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = "—"
			for _, s := range r.Samples {
				if s.At == t && s.Node == c.node && s.Component == c.comp {
					g := "—"
					if s.Goroutines >= 0 {
						g = fmt.Sprint(s.Goroutines)
					}
					cells[i] = fmt.Sprintf("%.0f / %d / %s", float64(s.RSS)/(1<<20), s.FDs, g)
					churned = s.Churned
				}
			}
		}
		label := fmt.Sprintf("%.1f", t/60)
		if t == times[len(times)-1] {
			label += " (drained)"
		}
		fmt.Fprintf(w, "| %s | %d | %s |\n", label, churned, strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\n| node | component | compared with | RSS MiB | descriptors | goroutines | pods churned | bounded |\n|---|---|---|---|---|---|---|---|\n")
	for _, g := range r.Growth {
		gor := "—"
		if g.Goroutines[0] >= 0 && g.Goroutines[1] >= 0 {
			gor = fmt.Sprintf("%d → %d", g.Goroutines[0], g.Goroutines[1])
		}
		ok := "yes"
		if !g.OK {
			ok = "NO: " + g.Why
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.0f → %.0f | %d → %d | %s | %d | %s |\n", g.Node, g.Component, g.From,
			float64(g.RSS[0])/(1<<20), float64(g.RSS[1])/(1<<20), g.FDs[0], g.FDs[1], gor, g.Churned, ok)
	}
}
