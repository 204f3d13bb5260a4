package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/plural"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/subpath"
	"github.com/nodevol/nodevol/volume"
)

// scanVolume is what "nodevol scan" reports about one volume directory.
// The exported fields are the --json output, one object per volume per
// line; their names are part of the CLI's contract.
//
// Medium is what is on disk; it is empty when the volume could not be
// examined (Verdict is then verdictError, SafeToRemove false and Reason
// starts with "could not be examined").
//
// Verdict and ReasonCode say whether the volume is healthy (ok, in-use)
// or not (danger, unknown, error); SafeToRemove keeps its old meaning,
// "could the directory be removed right now without crossing a mount",
// which is false for every healthy in-use volume.
type scanVolume struct {
	PodUID       string              `json:"podUID"`
	Plugin       string              `json:"plugin"`
	Volume       string              `json:"volume"`
	Path         string              `json:"path"`
	Medium       string              `json:"medium"`
	MountPoint   bool                `json:"mountPoint"`
	NestedMounts []mountdetect.Mount `json:"nestedMounts"` // never nil: [] in JSON
	// Subpaths are the containers' subPath entries of the volume, at
	// <root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>. A
	// mounted one does not make the volume unsafe: the volume manager
	// unmounts them (subpath.Clean) before it tears the volume down.
	Subpaths     []subpath.Entry `json:"subpaths"` // never nil: [] in JSON
	Verdict      scanVerdict     `json:"verdict"`
	ReasonCode   reasonCode      `json:"reasonCode"`
	SafeToRemove bool            `json:"safeToRemove"`
	Reason       string          `json:"reason"`
	// MountNamespace says whether the answers are the host's (nsgate.go).
	MountNamespace mountNamespaceJSON `json:"mountNamespace"`

	exists       bool
	sure         bool   // the kernel is sure about MountPoint
	fsType       string // of the volume directory
	hugePageSize int64
	err          error // could not be examined
}

// setCode sets the reason code and the verdict it belongs to.
func (v *scanVolume) setCode(c reasonCode) { v.ReasonCode, v.Verdict = c, c.verdict() }

// scanProblem and scanLeftover are the other --json lines of "scan",
// told apart from volumes (and from each other) by their first key.
//
// OverBudget marks a problem where a bound of the scan stopped a listing
// (volume.ScanLimits): entries past it were not examined.
type scanProblem struct {
	Problem    string `json:"problem"`
	Error      string `json:"error"`
	OverBudget bool   `json:"overBudget,omitempty"`

	err error
}

func newScanProblem(path string, err error) scanProblem {
	return scanProblem{Problem: path, Error: err.Error(), OverBudget: errors.Is(err, volume.ErrTooManyEntries), err: err}
}

type scanLeftover struct {
	Leftover string `json:"leftover"`
}

// scanReport is one scan of a kubelet root.
type scanReport struct {
	root      string
	volumes   []*scanVolume
	problems  []scanProblem
	leftovers []scanLeftover
	// overBudget are the pod directories a bound stopped the scan in
	// (sorted); incomplete says a bound stopped it somewhere, in a pod or
	// in the pods directory: what is past it was not examined.
	overBudget []string
	incomplete bool
}

// count is how many volumes have the verdict v.
func (s *scanReport) count(v scanVerdict) (n int) {
	for i := range s.volumes {
		if s.volumes[i].Verdict == v {
			n++
		}
	}
	return n
}

// code is the exit code the scan calls for:
//
//   - 2 when a volume (verdict error) or an entry could not be examined or
//     read;
//   - else 1 when a volume is in danger, when the kernel cannot say
//     whether a volume directory is a mount point (verdict unknown: unsure
//     is treated as unsafe), or when an entry does not parse (nodevol did
//     not look inside it, so it cannot rule out a dangerous mount there;
//     the kubelet never writes such entries);
//   - 2 also when the scan is incomplete: a bound stopped it (a pod over
//     its budget), and what is past the bound was not examined;
//   - else 0: ok and in-use volumes are healthy, and leftover pod
//     directories are not a failure.
func (s *scanReport) code() int {
	code := ExitOK
	if s.incomplete {
		code = ExitError
	}
	for i := range s.volumes {
		switch s.volumes[i].Verdict {
		case verdictError:
			code = max(code, ExitError)
		case verdictDanger, verdictUnknown:
			code = max(code, ExitRefused)
		}
	}
	for _, p := range s.problems {
		code = max(code, ExitRefused)
		var pe *fs.PathError
		if errors.As(p.err, &pe) && !errors.Is(p.err, fs.ErrNotExist) {
			code = ExitError // an entry that could not be read, not a bad name
		}
	}
	return code
}

// scanRoot lists every volume directory under root and examines each one,
// answering every mount question from one read of the mount table, within
// volume.DefaultScanLimits.
func scanRoot(root string) (*scanReport, error) {
	return scanRootWithin(root, volume.DefaultScanLimits())
}

// scanOptionsFrom are the emptyDir plugin's options for a scan from the
// mount namespace ns: from any but the host's (an agent in a container),
// a volume's own tmpfs or hugetlbfs is a propagated copy with mount IDs of
// its own, proven the volume's by its superblock instead
// (emptydir.FromAnotherMountNamespace).
func scanOptionsFrom(ns mountdetect.MountNamespace) []emptydir.Option {
	if ns.State == mountdetect.MountNamespaceHost {
		return nil
	}
	return []emptydir.Option{emptydir.FromAnotherMountNamespace()}
}

// scanRootWithin is scanRoot within limits: every pod gets the same share
// of entries (volume.ScanLimits), spent on listing its volumes and on its
// subPath trees; a pod over it is a problem, and the others are examined
// all the same. The emptyDir volumes are examined by a plugin with opts.
func scanRootWithin(root string, limits volume.ScanLimits, opts ...emptydir.Option) (*scanReport, error) {
	layout, err := scanLayout(root)
	if err != nil {
		return nil, err
	}
	// Each plugin directory's volumes are examined while ScanVolumes holds
	// it open (examineListed), through the descriptor that was listed: the
	// mount table is read, and the root opened for the emptyDir plans, at
	// the first one (not at all when there are no volumes).
	s := &scanReport{root: root}
	var ex *listedScan
	var exErr error
	visit := func(pd volume.PluginDir) {
		if ex == nil && exErr == nil {
			ex, exErr = newListedScan(layout, opts...)
		}
		if exErr == nil {
			ex.examineListed(pd)
		}
	}
	found, err := layout.ScanVolumes(limits, volume.WithPluginDirOnly(visit))
	if ex != nil {
		defer ex.close()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s has no pods directory (%s does not exist): is it a kubelet root?", root, layout.PodsDir())
	}
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	if exErr != nil {
		return nil, exErr
	}
	s.overBudget, s.incomplete = found.OverBudget, found.Incomplete
	for _, p := range found.Problems {
		s.problems = append(s.problems, newScanProblem(p.Path, p.Err))
	}
	for _, l := range found.Leftovers {
		s.leftovers = append(s.leftovers, scanLeftover{Leftover: l})
	}
	if ex != nil {
		s.volumes = ex.verdicts()
		ex.sc.addSubpaths(s, 0, found.Budgets, ex.hasSubpaths)
	}
	return s, nil
}

// listedScan is a whole scan's examination of the volumes ScanVolumes
// lists, one plugin directory at a time (examineListed), with one read
// of the mount table.
type listedScan struct {
	sc        *rootScanner
	dirs      *pluginDirs
	emptyDirs *emptydir.Planner
	// chunks hold the verdicts, in order, in slices of verdictChunk that
	// are never grown: a verdict is a few hundred bytes, and a slice grown
	// by appending copies them all again at each doubling. The report
	// points into them (verdicts): nothing is copied.
	chunks [][]scanVolume
	// hasSubpaths says, by pod UID, whether a pod directory listed has a
	// volume-subpaths entry (addSubpaths).
	hasSubpaths map[string]bool
}

// verdictChunk is how many verdicts a chunk of listedScan holds.
const verdictChunk = 1024

// verdicts is every verdict, in order: pointers into the chunks, which
// are never copied.
func (ex *listedScan) verdicts() []*scanVolume {
	n := 0
	for _, c := range ex.chunks {
		n += len(c)
	}
	out := make([]*scanVolume, 0, n)
	for _, c := range ex.chunks {
		for i := range c {
			out = append(out, &c[i])
		}
	}
	ex.chunks = nil
	return out
}

// newListedScan reads the mount table and opens the root of layout for a
// scan; the emptyDir volumes are examined by a plugin with opts.
func newListedScan(layout volume.Layout, opts ...emptydir.Option) (*listedScan, error) {
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		return nil, err
	}
	sc, err := openRootScanner(layout, tab, opts...)
	if err != nil {
		return nil, err
	}
	return &listedScan{sc: sc, dirs: &pluginDirs{pods: sc.pods, tab: tab}, emptyDirs: sc.emptyDirs.NewPlanner(), hasSubpaths: map[string]bool{}}, nil
}

func (ex *listedScan) close() {
	ex.dirs.close()
	ex.emptyDirs.Close()
	ex.sc.close()
}

// examineListed adds the verdicts of pd's volumes, the plugin
// directory that ScanVolumes lists them in and its pod directory still
// open: an emptyDir is planned through both (emptydir.Planner.PlanListed),
// a volume of any other plugin examined relative to the plugin directory
// (its subPath trees are read after the listing, addSubpaths, for the
// pods whose directory, asked here, has a volume-subpaths entry).
func (ex *listedScan) examineListed(pd volume.PluginDir) {
	if len(pd.Volumes) == 0 {
		return
	}
	if uid := pd.Volumes[0].PodUID; pd.Pod >= 0 {
		if _, ok := ex.hasSubpaths[uid]; !ok {
			ex.hasSubpaths[uid] = ex.sc.hasSubpaths(uid, func(name string) bool { return hasEntryIn(pd.Pod, name) })
		}
	}
	if pd.Volumes[0].Plugin == emptydir.PluginName {
		ex.emptyDirs.PlanListed(pd, ex.sc.tab, func(i int, plan emptydir.Plan, err error) {
			vd := pd.Volumes[i]
			ex.add(emptyDirVerdict(vd, plan, err, ex.sc.texts, func() string { return ex.sc.realPath(vd) }))
		})
		return
	}
	ex.dirs.listed(pd)
	defer ex.dirs.close()
	for _, vd := range pd.Volumes {
		ex.add(ex.sc.verdict(ex.emptyDirs, ex.dirs, vd, pd.Budget))
	}
}

// add appends v to the verdicts.
func (ex *listedScan) add(v scanVolume) {
	if n := len(ex.chunks); n == 0 || len(ex.chunks[n-1]) == verdictChunk {
		ex.chunks = append(ex.chunks, make([]scanVolume, 0, verdictChunk))
	}
	c := &ex.chunks[len(ex.chunks)-1]
	*c = append(*c, v)
}

// rootScanner examines the volume directories of one kubelet root, with
// every mount question answered from one read of the mount table.
type rootScanner struct {
	layout volume.Layout
	// realRoot is the root as the mount table names it (symlinks
	// resolved); rootDir and pods are the root and its pods directory,
	// opened once.
	realRoot      string
	rootDir, pods *fsat.Dir
	subpaths      *subpath.Cleaner
	tab           *mountdetect.MountTable
	// emptyDirs examines the emptyDir volumes (its Planner, as
	// emptydir.PlanTearDown).
	emptyDirs *emptydir.Plugin
	// texts are the verdicts' reasons made so far.
	texts reasonTexts
}

// openRootScanner opens the root of layout for a scan; the emptyDir
// volumes are examined by a plugin with opts.
func openRootScanner(layout volume.Layout, tab *mountdetect.MountTable, opts ...emptydir.Option) (*rootScanner, error) {
	root := layout.Root()
	// The kernel names mounts by resolved paths; the volumes are listed
	// under root as given (it may be a symlink, as /var/lib/kubelet is on
	// some nodes). The resolved root tells the mounts on a volume
	// directory from those beneath it; it names nothing that is acted on.
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("kubelet root: %w", err)
	}
	// Volumes of plugins but emptyDir are examined through descriptors
	// from here, as ScanVolumes listed them (examinePluginVolume).
	rootDir, err := fsat.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("kubelet root: %w", err)
	}
	pods, err := rootDir.OpenDir(filepath.Base(layout.PodsDir()))
	if err != nil {
		rootDir.Close()
		return nil, fmt.Errorf("pods directory: %w", err)
	}
	return &rootScanner{layout: layout, realRoot: realRoot, rootDir: rootDir, pods: pods, subpaths: subpath.New(layout), tab: tab,
		emptyDirs: emptydir.New(volume.NewHost(layout, nil, 0), opts...), texts: reasonTexts{}}, nil
}

func (sc *rootScanner) close() {
	sc.pods.Close()
	sc.rootDir.Close()
}

// examine appends to s the verdicts of vols, as ScanVolumes listed them,
// reading each pod's subPath tree within its budget in budgets (a pod
// that fills it spends its own share, no one else's).
func (sc *rootScanner) examine(s *scanReport, vols []volume.VolumeDir, budgets map[string]*volume.EntryBudget) {
	dirs := &pluginDirs{pods: sc.pods, tab: sc.tab}
	defer dirs.close()
	emptyDirs := sc.emptyDirs.NewPlanner()
	defer emptyDirs.Close()
	// The verdicts are made in one array, the report pointing into it.
	verdicts := make([]scanVolume, len(vols))
	s.volumes = slices.Grow(s.volumes, len(vols))
	first := len(s.volumes)
	for i, vd := range vols {
		verdicts[i] = sc.verdict(emptyDirs, dirs, vd, budgets[vd.PodUID])
		s.volumes = append(s.volumes, &verdicts[i])
	}
	sc.addSubpaths(s, first, budgets, nil)
}

// verdict is examineVolume of vd, a volume of the root; b is its pod's
// budget (nil: none).
func (sc *rootScanner) verdict(emptyDirs *emptydir.Planner, dirs *pluginDirs, vd volume.VolumeDir, b *volume.EntryBudget) scanVolume {
	return examineVolume(emptyDirs, dirs, sc.tab, sc.texts, vd, b, func() string { return sc.realPath(vd) })
}

// realPath is vd's path as the mount table names it (under the resolved
// root).
func (sc *rootScanner) realPath(vd volume.VolumeDir) string {
	return filepath.Join(sc.realRoot, strings.TrimPrefix(vd.Path, sc.layout.Root()))
}

// hasSubpaths reports whether the pod uid has a volume-subpaths entry, as
// has says of the entry's name, or whether that cannot be told (it only
// skips work).
func (sc *rootScanner) hasSubpaths(uid string, has func(name string) bool) bool {
	dir, err := sc.layout.PodVolumeSubpathsDir(uid)
	return err != nil || has(filepath.Base(dir))
}

// addSubpaths adds to the verdicts s.volumes[first:] their subPath
// entries, reading each pod's subPath tree within its budget in budgets
// (a pod that fills it spends its own share, no one else's). hasSubpaths
// says, by pod UID, which pods have a volume-subpaths entry, as far as
// the caller found out (nil: nothing).
func (sc *rootScanner) addSubpaths(s *scanReport, first int, budgets map[string]*volume.EntryBudget, hasSubpaths map[string]bool) {
	// Most pods have no volume-subpaths directory: one lstat per pod says
	// so, instead of a walk from the root per volume. It only skips work:
	// whatever is there is examined by descriptors.
	if hasSubpaths == nil {
		hasSubpaths = map[string]bool{}
	}
	for _, v := range s.volumes[first:] {
		uid := v.PodUID
		has, ok := hasSubpaths[uid]
		if !ok {
			has = sc.hasSubpaths(uid, func(name string) bool { return hasEntry(sc.pods, uid, name) })
			hasSubpaths[uid] = has
		}
		if errors.Is(v.err, volume.ErrTooManyEntries) {
			s.overBudgetAt(sc.layout, uid, v.err) // its emptyDir metadata spent the pod's budget
		}
		if v.err == nil && has {
			if stop := v.addSubpaths(sc.subpaths, sc.tab, budgets[uid]); stop != nil {
				s.overBudgetAt(sc.layout, uid, stop)
			}
		}
	}
}

// overBudgetAt records that the budget of the pod uid stopped the
// examination of its subPath tree or of an emptyDir's metadata
// directory: a problem where it stopped, and the
// pod among those over budget.
func (s *scanReport) overBudgetAt(layout volume.Layout, uid string, stop error) {
	where := layout.PodsDir()
	var pe *fs.PathError
	if errors.As(stop, &pe) {
		where = pe.Path
	}
	s.problems = append(s.problems, newScanProblem(where, stop))
	s.incomplete = true
	pod, err := layout.PodDir(uid)
	if err != nil {
		return
	}
	if i, found := slices.BinarySearch(s.overBudget, pod); !found {
		s.overBudget = slices.Insert(s.overBudget, i, pod)
	}
}

// emptyDirVerdict is the verdict of vd, an emptyDir volume directory,
// from its teardown plan (or the error that stopped it), its reason from
// texts. realPath gives vd.Path as the mount table names it, asked only
// when the plan lists mounts.
func emptyDirVerdict(vd volume.VolumeDir, plan emptydir.Plan, err error, texts reasonTexts, realPath func() string) scanVolume {
	v := scanVolume{PodUID: vd.PodUID, Plugin: vd.Plugin, Volume: vd.Volume, Path: vd.Path, NestedMounts: []mountdetect.Mount{}, Subpaths: []subpath.Entry{}}
	if err != nil {
		v.fail(err)
		return v
	}
	v.exists = plan.Exists
	v.Medium = emptydir.MediumOf(plan.Info).String()
	v.MountPoint, v.sure = plan.Info.MountPoint, plan.Info.MountPointSure || !plan.Exists
	v.fsType, v.hugePageSize = plan.Info.FSType, plan.Info.HugePageSize
	var real string
	if len(plan.Mounts) > 0 {
		real = realPath()
	}
	for _, m := range plan.Mounts {
		if !onDir(m, vd.Path, real) { // PlanTearDown lists the directory itself too
			v.NestedMounts = append(v.NestedMounts, m)
		}
	}
	v.SafeToRemove = plan.Action != emptydir.ActionRefuse
	v.setCode(emptyDirCode(&plan))
	v.Reason = texts.ofPlan(plan)
	return v
}

// examineVolume gives a volume directory its verdict, and says whether it
// could be removed without touching another mount. An emptyDir gets the
// answer its own teardown would give (emptyDirCode): its own tmpfs or
// hugetlbfs is in use, and safe to remove because teardown unmounts it.
// Any other plugin's volume is in use when it is a mount point with
// nothing beneath it, and safe to remove only when nothing is mounted on
// it or beneath it, because unmounting it is that plugin's job.
//
// realPath gives vd.Path as the mount table names it (under the resolved
// root), asked only of an emptyDir with mounts listed. An emptyDir is planned by emptyDirs, which holds its pod's
// directories open for the pod's next volumes; any other plugin's volume
// is reached through dirs, its plugin directory opened from the pods
// directory, by descriptors
// (examinePluginVolume).
func examineVolume(emptyDirs *emptydir.Planner, dirs *pluginDirs, tab *mountdetect.MountTable, texts reasonTexts, vd volume.VolumeDir, b *volume.EntryBudget, realPath func() string) scanVolume {
	if vd.Plugin == emptydir.PluginName {
		plan, err := emptyDirs.PlanTearDownWithin(vd.PodUID, vd.Volume, tab, b)
		return emptyDirVerdict(vd, plan, err, texts, realPath)
	}
	v := scanVolume{PodUID: vd.PodUID, Plugin: vd.Plugin, Volume: vd.Volume, Path: vd.Path, NestedMounts: []mountdetect.Mount{}, Subpaths: []subpath.Entry{}}
	fail := func(err error) scanVolume {
		v.fail(err)
		return v
	}
	e := examinePluginVolume(dirs, tab, vd)
	defer e.close()
	c := e.checkResult
	if c.err != nil {
		return fail(c.err)
	}
	v.exists = c.Exists
	v.Medium = c.Medium.String()
	v.MountPoint, v.sure = c.MountPoint, c.MountPointSure || !c.Exists
	v.fsType, v.hugePageSize = c.FSType, c.pageSize
	v.NestedMounts = append(v.NestedMounts, c.NestedMounts...)
	v.SafeToRemove = c.SafeToRemove
	v.setCode(pluginCode(&c))
	if vd.Plugin == csiPluginName && v.csiTarget(tab, &e) {
		return v
	}
	if v.wrappedForeign(&c) {
		return v
	}
	why := make([]string, 0, 3)
	switch {
	case !c.Exists:
		why = append(why, "gone since it was listed")
	case c.MountPoint && len(c.NestedMounts) == 0:
		why = append(why, texts.of(textMountedInUse, vd.Plugin, c.FSType))
	case c.MountPoint:
		why = append(why, texts.of(textMounted, vd.Plugin, c.FSType))
	case !c.MountPointSure:
		why = append(why, "the kernel cannot say for sure whether it is a mount point")
	}
	if n := len(c.NestedMounts); n > 0 {
		why = append(why, plural.Count(n, "mount")+" beneath it, which its plugin's teardown would cross; unmount "+plural.Of(n, "it", "them")+" first")
	}
	if c.Exists && c.SafeToRemove {
		why = append(why, texts.of(textRemovable, vd.Plugin, ""))
	}
	v.Reason = strings.Join(why, "; ")
	return v
}

// reasonTexts are the verdicts' reasons that depend only on a plugin's
// name, a filesystem type or an emptyDir plan's reason, each made once
// for all the volumes that share it (a scan gives thousands the same),
// up to maxReasonTexts of them.
type reasonTexts map[reasonText]string

// reasonText is a reason of kind for a and b.
type reasonText struct {
	kind textKind
	a, b string
}

type textKind uint8

const (
	textMountedInUse textKind = iota // a: plugin, b: filesystem type
	textMounted                      // a: plugin, b: filesystem type
	textRemovable                    // a: plugin
	textPlan                         // a: the plan's reason and remedy, b: its action
)

// maxReasonTexts bounds reasonTexts: names are what whoever writes in a
// pod directory chose, and past that many a reason is made for its
// volume alone, as it would be without them.
const maxReasonTexts = 256

// of is the reason of kind for a and b.
func (t reasonTexts) of(kind textKind, a, b string) string {
	k := reasonText{kind, a, b}
	if s, ok := t[k]; ok {
		return s
	}
	var s string
	switch kind {
	case textMountedInUse:
		s = fmt.Sprintf("a %s volume mounted on its own directory (%s): in use; its plugin unmounts it before the directory can be removed", a, b)
	case textMounted:
		s = fmt.Sprintf("a %s volume mounted on its own directory (%s)", a, b)
	case textRemovable:
		s = fmt.Sprintf("a %s volume directory with nothing mounted on or beneath it; nodevol rm can remove it", a)
	case textPlan:
		s = a + b
	}
	if len(t) < maxReasonTexts {
		t[k] = s
	}
	return s
}

// ofPlan is the reason of an emptyDir's verdict: its teardown plan's,
// and what teardown would do.
func (t reasonTexts) ofPlan(plan emptydir.Plan) string {
	var then string
	switch plan.Action {
	case emptydir.ActionNone:
		return "gone since it was listed"
	case emptydir.ActionUnmountAndRemove:
		then = "; nodevol teardown unmounts it, then removes it"
	case emptydir.ActionRemove:
		then = "; nodevol teardown removes it"
	case emptydir.ActionRefuse:
		then = "; nodevol teardown would refuse"
	}
	if plan.Remedy != "" {
		return withRemedy(plan) + then // names a path: this volume's alone
	}
	return t.of(textPlan, plan.Reason, then)
}

// csiPluginName is the CSI plugin, which mounts a volume not on its volume
// directory but on the subdirectory csiTargetDir of it (the kubelet's
// CSI target path, beside its vol_data.json).
const (
	csiPluginName = "kubernetes.io/csi"
	csiTargetDir  = "mount"
)

// csiTarget recognises a CSI volume in use: c, the volume directory, is
// not a mount point (and the kernel is sure) and has exactly one mount
// beneath it, which is on <dir>/mount with nothing beneath that. It then
// reports that mount as the volume's own (the MOUNT POINT column, not a
// nested mount) and says true. Anything else (a second mount there,
// stacked or nested) is left to the generic answer: a nested-mount
// danger.
func (v *scanVolume) csiTarget(tab *mountdetect.MountTable, c *examinedDir) bool {
	if !c.Exists || c.kind != kindDir || c.MountPoint || !c.MountPointSure || len(c.NestedMounts) != 1 {
		return false
	}
	target := filepath.Join(v.Path, csiTargetDir)
	m := c.child(tab, csiTargetDir, target)
	if m.err != nil || m.kind != kindDir || !m.MountPoint || !m.MountPointSure || len(m.NestedMounts) > 0 {
		return false
	}
	v.Medium = m.Medium.String()
	v.MountPoint, v.sure = true, true
	v.fsType, v.hugePageSize = m.FSType, m.pageSize
	v.NestedMounts = v.NestedMounts[:0]
	v.setCode(reasonPluginMount)
	v.Reason = fmt.Sprintf("a %s volume mounted on its target directory %s (%s): in use; its driver unmounts it before the directory can be removed", csiPluginName, csiTargetDir, m.FSType)
	return true
}

// emptyDirWrapped are the plugins whose volumes the kubelet tears down
// through the emptyDir plugin (volumeutil.UnmountViaEmptyDir), with
// whether their medium is Memory (a tmpfs of their own on the directory)
// or Default (nothing mounted: gitRepo). A switch, not a map: a map
// literal is built at every start of every command.
func emptyDirWrapped(plugin string) (memory, ok bool) {
	switch plugin {
	case "kubernetes.io/secret", "kubernetes.io/configmap", "kubernetes.io/projected", "kubernetes.io/downward-api":
		return true, true
	case "kubernetes.io/git-repo":
		return false, true
	}
	return false, false
}

// wrappedForeign recognises a foreign mount on the directory of a volume
// in emptyDirWrapped, c, with nothing beneath it (a mount beneath is a
// nested-mount danger already). The kubelet's emptyDir teardown unmounts
// the top mount only when statfs says tmpfs, and otherwise removes the
// directory's contents with os.RemoveAll, through whatever is mounted
// there; so anything but a single tmpfs (none at all for gitRepo) is a
// danger. A mount missing from the table (made since it was read: its
// type is "") is left in use. It says true when it set the verdict.
func (v *scanVolume) wrappedForeign(c *checkResult) bool {
	memory, ok := emptyDirWrapped(v.Plugin)
	if !ok || !c.Exists || !c.MountPoint || len(c.NestedMounts) > 0 {
		return false
	}
	switch {
	case len(c.on) > 1:
		v.setCode(reasonStackedMounts)
		v.Reason = fmt.Sprintf("%d mounts stacked on a %s volume directory: the kubelet tears it down as an emptyDir, which unmounts at most the top one and removes the directory's contents through the others", len(c.on), v.Plugin)
	case !memory:
		v.setCode(reasonForeignMount)
		v.Reason = fmt.Sprintf("a %s mount on a %s volume directory, which has none of its own: the kubelet tears it down as an emptyDir, removing the directory's contents through the mount", c.FSType, v.Plugin)
	case c.FSType != "tmpfs" && c.FSType != "":
		v.setCode(reasonForeignMount)
		v.Reason = fmt.Sprintf("a %s mount on a %s volume directory, not its own tmpfs: the kubelet tears it down as an emptyDir, which unmounts only a tmpfs and otherwise removes the directory's contents through the mount", c.FSType, v.Plugin)
	default:
		return false
	}
	v.SafeToRemove = false
	for _, m := range c.on {
		v.Reason += "; " + m.String()
	}
	return true
}

// emptyDirCode is the reason code of an emptyDir volume, from the code of
// the plan PlanTearDown made: nothing here looks at the mounts again. A
// mount of the volume's own that is elsewhere (moved, or bound elsewhere
// too) is a mount its teardown must not leave behind: nested-mount, like
// the mounts beneath it.
func emptyDirCode(plan *emptydir.Plan) reasonCode {
	switch plan.Code {
	case emptydir.ReasonMissing:
		return reasonGone
	case emptydir.ReasonNotMounted, emptydir.ReasonMountGone, emptydir.ReasonSymlink, emptydir.ReasonFile:
		return reasonNotMounted
	case emptydir.ReasonOwnMount:
		return reasonOwnMount
	case emptydir.ReasonAdoptedMount:
		return reasonAdoptedMount
	case emptydir.ReasonNestedMounts, emptydir.ReasonMountElsewhere:
		return reasonNestedMount
	case emptydir.ReasonStackedMounts:
		return reasonStackedMounts
	case emptydir.ReasonUncertain:
		return reasonUncertain
	}
	return reasonForeignMount // foreign, no record, unreadable metadata, changed
}

// onDir reports whether m is mounted on the volume directory itself,
// named path, or realPath in the mount table.
func onDir(m mountdetect.Mount, path, realPath string) bool {
	return m.MountPoint == path || m.MountPoint == realPath
}

// pluginCode is the reason code of a volume of any plugin but emptyDir,
// from what examineIn found.
func pluginCode(c *checkResult) reasonCode {
	switch {
	case !c.Exists:
		return reasonGone
	case len(c.NestedMounts) > 0:
		return reasonNestedMount
	case !c.MountPointSure:
		return reasonUncertain
	case c.MountPoint:
		return reasonPluginMount
	}
	return reasonNotMounted
}

// fail marks the volume as one that could not be examined.
func (v *scanVolume) fail(err error) {
	v.err = err
	v.setCode(reasonError)
	v.Medium, v.MountPoint, v.SafeToRemove = "", false, false
	v.NestedMounts = v.NestedMounts[:0]
	v.Subpaths = v.Subpaths[:0]
	v.Reason = "could not be examined: " + err.Error()
}

// addSubpaths lists the volume's subpath entries, sorted by container and
// index, and says in the reason what the mounted ones mean. The volume's
// own subPath binds do not change the verdict: the volume manager and
// nodevol teardown unmount them before the teardown, and they are not
// beneath the volume directory, so neither "nodevol teardown" nor
// "nodevol rm" of the volume would enter them. Any other mount in the
// subpath tree is a danger (subpath-foreign-mount): the teardown would
// refuse. The tree is read within b, the pod's budget; when b stops it,
// the volume could not be examined, and the error is returned (matching
// volume.ErrTooManyEntries) for the scan to report.
func (v *scanVolume) addSubpaths(c *subpath.Cleaner, tab *mountdetect.MountTable, b *volume.EntryBudget) (stop error) {
	entries, refusal, err := c.Examine(v.PodUID, v.Plugin, v.Volume, tab, subpath.WithinBudget(b))
	if err != nil {
		v.fail(fmt.Errorf("examine subpaths: %w", err))
		if errors.Is(err, volume.ErrTooManyEntries) {
			return err
		}
		return nil
	}
	v.Subpaths = append(v.Subpaths, entries...) // sorted
	var refused *subpath.RefusedError
	switch {
	case errors.As(refusal, &refused) && len(refused.Mounts) > 0:
		n := len(refused.Mounts)
		v.SafeToRemove = false
		v.setCode(reasonSubpathForeignMount)
		v.Reason += fmt.Sprintf("; %s in its subPath tree %s not the volume's own subPath binds, so nodevol teardown would refuse:", plural.Count(n, "mount"), plural.Of(n, "is", "are"))
		for _, m := range refused.Mounts {
			v.Reason += " " + m.String()
		}
		if len(refused.Errs) > 0 {
			v.fail(errors.Join(refused.Errs...))
		}
		return nil
	case refusal != nil:
		v.fail(fmt.Errorf("examine subpaths: %w", refusal))
		return nil
	}
	mounted := countMounted(entries)
	if mounted > 0 {
		v.Reason += fmt.Sprintf("; %s of its containers %s active: the volume manager and nodevol teardown unmount %s before the teardown, so %s not make the volume unsafe",
			plural.Count(mounted, "subPath bind mount"), plural.Of(mounted, "is", "are"), plural.Of(mounted, "it", "them"), plural.Of(mounted, "it does", "they do"))
	}
	return nil
}

// scanHelp is the help of "nodevol scan", after its usage line.
const scanHelp = `List every pod volume directory under the kubelet root
(<root>/pods/<uid>/volumes/<plugin>/<volume>, all plugins) and say, for
each, its medium, whether it is a mount point, the mounts nested beneath it
and a verdict. The mount table is read once. Nothing is changed.

  ok       nothing is mounted on or beneath it (or it is gone)
  in-use   a single mount on its own directory, made by its own plugin,
           with nothing beneath it: a Memory or HugePages emptyDir's own
           tmpfs or hugetlbfs (its teardown unmounts it), or a mounted CSI,
           NFS, secret or projected volume. Normal for a running pod.
  danger   a mount its teardown would cross or that is not its own: a
           mount nested inside the volume directory, a foreign or
           unprovable mount on an emptyDir directory, anything but a
           single tmpfs on a secret, configMap, projected or downwardAPI
           directory (the kubelet tears those down as emptyDirs), any
           mount on a gitRepo directory, stacked mounts, a foreign mount
           in its subPath tree
  unknown  the kernel cannot say for sure whether it is a mount point
  error    it could not be examined

Each verdict has a reason code (--json "reasonCode"): ok: not-mounted,
gone; in-use: own-mount, plugin-mount; danger: nested-mount,
foreign-mount, stacked-mounts, subpath-foreign-mount; unknown: uncertain;
error: error. An emptyDir gets the answer "nodevol teardown" would give.

Entries that do not parse (bad pod UIDs or names, files where directories
belong) are listed as problems, and pod directories without any volume
directory as leftovers.

Whoever can write into a pod directory can make any number of entries
there, so the scan reads a bounded number, and no pod can use up another's:
each pod gets the same budget, min(4,096, (65,536 - pod directories) /
pod directories) entries (594 on a node of 110 pods), for its volume and
plugin directories and its subPath tree, and at most 1,024 from any one
directory; the pods directory gives at most 8,192. A pod over its budget
is a problem ("overBudget": true in JSON) naming where the scan stopped,
the summary says INCOMPLETE, and the exit status is 2; every other pod is
examined all the same.

Containers' subPath entries of each volume
(<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>) are listed
under it, mounted or not. The volume's own subPath binds are not a danger:
the volume manager unmounts them before it tears the volume down.

--json prints one object per line: for each volume
  {"podUID","plugin","volume","path","medium","mountPoint","nestedMounts",
   "subpaths","verdict","reasonCode","safeToRemove","reason",
   "mountNamespace"}
with "subpaths" a list of {"container","index","path","mountPoint","own"}
and "mountNamespace" {"state","reason"}, then {"problem":PATH,"error":TEXT}
per problem (with "overBudget": true where a bound stopped the scan) and
{"leftover":PATH} per leftover pod directory. A string that is not valid
UTF-8 (JSON can only write U+FFFD for its bytes) is followed by the same
name plus "Base64", its exact bytes, as in every command's --json.
"safeToRemove" keeps its old meaning (the directory could be removed now
without crossing a mount: false for an in-use CSI or secret volume); the
verdict is what says whether a volume is healthy.

The answers are about this process's mount namespace. When that is not the
host's (a container's), or it cannot be told, stderr says whether the
mounts the host makes under the root are seen here all the same: a note
when the root is on a mount that receives them (a hostPath with
mountPropagation HostToContainer or Bidirectional), else a warning: a
mount made only in the host's namespace is not seen from here. With
--json, each volume's "mountNamespace" has "state" ("host", "foreign" or
"unknown") and "hostMountsVisible". --host-proc DIR names the host's /proc
mounted into a container, to compare with its PID 1.

Exit status: 0 every volume is ok or in-use and every entry parses
(leftovers are fine), 1 some volume is in danger or unknown, or some entry
does not parse (it was not looked inside), 2 the root or some entry could
not be read, a volume could not be examined, a pod was over its budget (the
scan is incomplete), or bad usage.`

func runScan(fs *flagSet, args []string, stdout, stderr io.Writer) int {
	asJSON := fs.Bool("json", false, "print one JSON object per volume, problem and leftover per line")
	root := fs.String("root", volume.DefaultRoot, "the kubelet root directory")
	nsFlags := addNamespaceFlags(fs.FlagSet, false)
	extra, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(extra) > 0 {
		return usageError(fs, stderr, "scan takes no arguments (got %q); use --root DIR", extra[0])
	}
	if *root == "" {
		return usageError(fs, stderr, "--root must not be empty")
	}
	if err := refuseDotDot(*root); err != nil {
		fmt.Fprintf(stderr, "nodevol scan: --root: %s\n", display(err.Error()))
		return ExitError
	}
	dir, err := filepath.Abs(*root)
	if err != nil {
		fmt.Fprintf(stderr, "nodevol scan: %s\n", display(err.Error()))
		return ExitError
	}
	ns, err := nsFlags.gate("scan")
	if err != nil {
		fmt.Fprintf(stderr, "nodevol scan: %s\n", display(err.Error()))
		return ExitError
	}
	vis := checkRootVisibility(ns.ns, dir, mountdetect.PropagationOf)
	if !*asJSON {
		switch {
		case ns.ns.State == mountdetect.MountNamespaceHost:
		case vis.visible:
			// A container whose kubelet root receives the host's mounts
			// (HostToContainer) sees them under the root.
			fmt.Fprintf(stderr, "nodevol scan: note: %s\n", display(vis.why))
		default:
			fmt.Fprintf(stderr, "nodevol scan: warning: %s\n", display(vis.why))
		}
	}
	s, err := scanRootWithin(dir, volume.DefaultScanLimits(), scanOptionsFrom(ns.ns)...)
	if err != nil {
		writeErrors(stderr, "nodevol scan: ", err, "")
		return ExitError
	}
	nsJSON := ns.json()
	nsJSON.HostMountsVisible = &vis.visible
	for i := range s.volumes {
		s.volumes[i].MountNamespace = nsJSON
	}
	// One write per buffer, not per table cell or JSON line: unbuffered,
	// the report's writes were most of a scan's system calls.
	out := bufio.NewWriter(stdout)
	if *asJSON {
		err = writeScanJSON(out, s)
	} else {
		writeScanHuman(out, s)
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodevol scan: write report: %v\n", err)
		return ExitError
	}
	return s.code()
}

func writeScanJSON(w io.Writer, s *scanReport) error {
	enc := newJSONEncoder(w)
	for i := range s.volumes {
		if err := enc.Encode(s.volumes[i]); err != nil {
			return err
		}
	}
	for i := range s.problems {
		if err := enc.Encode(&s.problems[i]); err != nil {
			return err
		}
	}
	for i := range s.leftovers {
		if err := enc.Encode(&s.leftovers[i]); err != nil {
			return err
		}
	}
	return nil
}

// writeScanHuman prints one table row per volume, then the details of the
// ones in danger, unknown or in error, the problems, the leftovers and a one-line summary. Every
// name, path and message is escaped by display: a volume named
// "x\nfake-row" must not add a row to the table.
func writeScanHuman(w io.Writer, s *scanReport) {
	if len(s.volumes) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "POD UID\tPLUGIN\tVOLUME\tMEDIUM\tMOUNT POINT\tNESTED\tVERDICT")
		for i := range s.volumes {
			v := s.volumes[i]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", display(v.PodUID), display(v.Plugin), display(v.Volume),
				display(v.mediumColumn()), display(v.mountColumn()), len(v.NestedMounts), v.Verdict)
		}
		tw.Flush()
	}
	printed := len(s.volumes) > 0
	section := func(title string) {
		if printed {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, title)
		printed = true
	}
	if s.count(verdictDanger)+s.count(verdictUnknown)+s.count(verdictError) > 0 {
		section("Danger, unknown and error (reason code, reason and mounts):")
		for i := range s.volumes {
			v := s.volumes[i]
			if v.Verdict == verdictOK || v.Verdict == verdictInUse {
				continue
			}
			fmt.Fprintf(w, "  %s (%s: %s)\n", display(v.Path), v.Verdict, v.ReasonCode)
			if v.err != nil {
				writeErrors(w, "    could not be examined: ", v.err, "")
			} else {
				fmt.Fprintf(w, "    %s\n", display(v.Reason))
			}
			for _, m := range v.NestedMounts {
				fmt.Fprintf(w, "    %s\n", m.String())
			}
		}
	}
	if s.hasSubpaths() {
		section("Subpaths (containers' subPath bind mounts; the volume manager unmounts them before tearing a volume down):")
		for i := range s.volumes {
			v := s.volumes[i]
			if len(v.Subpaths) == 0 {
				continue
			}
			fmt.Fprintf(w, "  %s\n", display(v.Path))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			for _, e := range v.Subpaths {
				state := "not mounted"
				if e.MountPoint {
					state = "mounted"
				}
				fmt.Fprintf(tw, "    %s/%s\t%s\t%s\n", display(e.Container), display(e.Index), state, display(e.Path))
			}
			tw.Flush()
		}
	}
	if len(s.problems) > 0 {
		section("Problems (entries that do not parse or could not be read; left alone):")
		for _, p := range s.problems {
			fmt.Fprintf(w, "  %s\n", display(p.Problem))
			if p.err != nil {
				writeErrors(w, "    ", p.err, "")
			} else {
				fmt.Fprintf(w, "    %s\n", display(p.Error))
			}
		}
	}
	if len(s.leftovers) > 0 {
		section("Leftovers (pod directories without any volume directory):")
		for _, l := range s.leftovers {
			fmt.Fprintf(w, "  %s\n", display(l.Leftover))
		}
	}
	if printed {
		fmt.Fprintln(w)
	}
	counts := make([]string, len(scanVerdicts))
	for i, v := range scanVerdicts {
		counts[i] = fmt.Sprintf("%d %s", s.count(v), v)
	}
	fmt.Fprintf(w, "%s: %s (%s), %s, %s%s\n", display(s.root), plural.Count(len(s.volumes), "volume"),
		strings.Join(counts, ", "), plural.Count(len(s.problems), "problem"), plural.Count(len(s.leftovers), "leftover"), s.incompleteNote())
}

// incompleteNote ends the summary line of an incomplete scan: "" when it
// is complete.
func (s *scanReport) incompleteNote() string {
	switch {
	case !s.incomplete:
		return ""
	case len(s.overBudget) == 0:
		return "; INCOMPLETE: the pods directory holds more entries than a scan reads (see the problems)"
	}
	n := len(s.overBudget)
	return fmt.Sprintf("; INCOMPLETE: %s over %s budget, not examined past it (see the problems)", plural.Count(n, "pod"), plural.Of(n, "its", "their"))
}

func (s *scanReport) hasSubpaths() bool {
	for i := range s.volumes {
		if len(s.volumes[i].Subpaths) > 0 {
			return true
		}
	}
	return false
}

func (v *scanVolume) mediumColumn() string {
	switch {
	case v.err != nil || !v.exists:
		return "-"
	case v.hugePageSize > 0:
		return v.Medium + "-" + volume.FormatQuantity(v.hugePageSize)
	}
	return v.Medium
}

func (v *scanVolume) mountColumn() string {
	switch {
	case v.err != nil || !v.exists:
		return "-"
	case !v.sure:
		return "unsure"
	case v.MountPoint:
		return "yes (" + v.fsType + ")"
	}
	return "no"
}

// scanLayout is the layout of the kubelet root a scan examines, which must
// exist: a scan of a missing root would report an empty, healthy node.
func scanLayout(root string) (volume.Layout, error) {
	layout, err := volume.NewLayout(root)
	if err != nil {
		return volume.Layout{}, err
	}
	if _, err := os.Stat(root); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return volume.Layout{}, fmt.Errorf("kubelet root %s does not exist", root)
		}
		return volume.Layout{}, fmt.Errorf("kubelet root: %w", err)
	}
	return layout, nil
}
