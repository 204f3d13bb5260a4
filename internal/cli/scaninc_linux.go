package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// incrementalScan is serve's scan: the verdicts of scanRoot, kept between
// scans, with each scan re-examining only the pods a change can have
// affected, and every pod again at least every fullEvery.
//
// # What can make a kept verdict wrong, and what notices it
//
// Whoever can write into a pod directory (or mount into it, with
// bidirectional propagation) controls names, mounts and file contents
// there, and can change them between any two system calls. A verdict is
// about mounts: a volume is in danger when a mount is on or beneath it
// that its teardown would cross or that is not its own. So each scan:
//
//  1. Reads the mount table and compares it with the last read, mount by
//     mount (mountdetect.MountTable.ChangesSince): added, removed, or
//     changed in any field, the mount point the kernel reports included,
//     or replaced by another mount with the same line (the kernel reuses
//     classic IDs and device numbers; a new unique mount ID tells it).
//     That last one is how renames are seen: renaming a directory (a pod
//     directory, a volume directory, anything above a mount point) wakes
//     no watch of the table, but changes the mount point the kernel
//     reports for every mount beneath it. A mount moved into a volume
//     that was verified clean, by a rename or a RENAME_EXCHANGE of two
//     directories, is a changed mount whose new mount point is beneath
//     the volume. Each change names the pods it lies in: its mount point
//     before and after, as the table names it and as reached through
//     every other mount of the same filesystem (a second bind mount of a
//     parent directory), and the same for every mount it sits on or
//     inside; a tmpfs or hugetlbfs change also names every pod holding a
//     mount of the same source, unless the source is a generic one
//     ("tmpfs", "none"): an emptyDir's own tmpfs, whose source is a name
//     of its own, bound or moved elsewhere makes its volume's teardown
//     refuse. Those pods are re-read and re-examined whole. A change at
//     or above the pods directory (the root's own mount, say), or a pods
//     directory that is another inode, re-examines everything.
//  2. Checks, per pod, the identity and change time (inode, device,
//     ctime, type) of its volumes directory and each plugin directory in
//     it: the directories whose entries make the list of volumes (a
//     volumes directory replaced is another inode). A volume directory
//     created, removed, renamed or swapped changes its parent's ctime,
//     which no one can set back (a utimensat sets the ctime to now too).
//     A pod whose directories changed is re-read and re-examined; so is
//     the pods directory, for pods that came or went. A stamp whose ctime
//     is less than settleAfter old (a change in the same clock tick as
//     the stamp, or during the listing it stands for, could leave it
//     equal) does not count as seen: that pod is re-read at the next scan
//     too. Every interval's scan checks the stamps; a mount change's scan
//     soon after does not (stampEvery), and examines the pods the change
//     lies in and the pods new since the last scan.
//
// What is not checked between two whole scans is what cannot hide a mount:
// an emptyDir's metadata (a record rewritten in place changes what
// teardown would do with a mount already examined, never which mounts
// exist; a record rewritten to claim a foreign mount changes nothing here
// until the mount changes), the entries of a subPath tree that are not
// mounted, and the contents of volume directories (a mount inside them is
// in the table). Those are read again at each whole scan, every fullEvery.
//
// The budgets hold as in scanRoot: a pod re-read gets the share the pods
// directory gives every pod (volume.OnlyPods), so a pod that keeps
// changing its directories is re-read at every scan within its own share
// and no one else's; when the share changes (pods came or went), every pod
// is re-read.
type incrementalScan struct {
	limits volume.ScanLimits
	// emptyDirOpts are the emptyDir plugin's options (scanOptionsFrom).
	emptyDirOpts []emptydir.Option
	// fullEvery: a whole scan at least this often (0: every scan).
	fullEvery time.Duration
	// stampEvery: the pods' directories are stamped again when the last
	// stamps are at least this old (0: at every scan). serve makes it
	// half the interval: every interval's scan stamps, a mount change's
	// scan soon after one does not.
	stampEvery  time.Duration
	lastStamped time.Time
	// settleAfter: how old a directory's ctime must be for its stamp to
	// prove that nothing changed since.
	settleAfter time.Duration
	clock       clock.PassiveClock
	// now is the wall clock the kernel stamps ctimes with.
	now func() time.Time

	root     string // of the kept state; "" before the first scan
	tab      *mountdetect.MountTable
	lastFull time.Time
	share    int
	// podsStamp is the pods directory's; podsProblems its own problems
	// (entries that are not pod directories, its bound).
	podsStamp    dirStamp
	podsSettled  bool
	podsProblems []scanProblem
	pods         map[string]*podScan
	order        []string // pod UIDs, as the pods directory lists them
	// lastReport is the report of the kept state, until a pod is read
	// again: a scan that re-reads nothing makes no new one. Its volumes
	// are the pods' kept verdicts themselves (report), so the verdicts
	// are held once, not once kept and once reported: at the scan's
	// bound of 48,000 volumes a copy is some 15 MB, twice that in the
	// garbage collector's goal.
	lastReport *scanReport

	// stats of the last scan, for tests and benchmarks.
	last incStats
}

// incStats says what one scan of incrementalScan did.
type incStats struct {
	full           bool
	changes        int // mounts changed since the last scan
	podsReexamined int
}

// podScan is what the last examination of one pod found.
type podScan struct {
	stamps     []dirStamp
	settled    bool
	volumes    []*scanVolume
	problems   []scanProblem
	leftover   string // the pod directory, when it holds no volume
	overBudget string // the pod directory, when a bound stopped its scan
}

// dirStamp is a directory entry's identity and change time.
type dirStamp struct {
	name      string
	dev, ino  uint64
	mode      uint32
	ctime     unix.Timespec
	missing   bool
	unsettled bool
}

func newIncrementalScan(clk clock.PassiveClock, fullEvery, stampEvery time.Duration) *incrementalScan {
	return &incrementalScan{limits: volume.DefaultScanLimits(), fullEvery: fullEvery, stampEvery: stampEvery,
		settleAfter: 2 * time.Second, clock: clk, now: time.Now}
}

// reset forgets everything: the next scan is a whole one.
func (c *incrementalScan) reset() {
	c.root, c.tab, c.pods, c.order, c.podsProblems, c.lastReport = "", nil, nil, nil, nil, nil
}

// scan scans root, re-examining what changed since the last scan (a
// whole scan the first time, every fullEvery, and whenever the kept state
// cannot say what changed).
func (c *incrementalScan) scan(root string) (*scanReport, error) {
	rep, err := c.update(root)
	if err != nil {
		c.reset()
	}
	return rep, err
}

func (c *incrementalScan) update(root string) (*scanReport, error) {
	c.last = incStats{}
	now := c.clock.Now()
	full := c.root != root || c.tab == nil || c.fullEvery <= 0 || now.Sub(c.lastFull) >= c.fullEvery
	layout, err := scanLayout(root)
	if err != nil {
		return nil, err
	}
	tab, err := mountdetect.ReadMountTable()
	if err != nil {
		return nil, err
	}
	sc, err := openRootScanner(layout, tab, c.emptyDirOpts...)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s has no pods directory (%s does not exist): is it a kubelet root?", root, layout.PodsDir())
	}
	if err != nil {
		return nil, err
	}
	defer sc.close()

	dirty := map[string]bool{}
	podsChanged := full
	if !full {
		changes := tab.ChangesSince(c.tab)
		c.last.changes = len(changes)
		full = c.attribute(changes, tab, filepath.Join(sc.realRoot, filepath.Base(layout.PodsDir())), dirty)
	}
	podsStamp := stampAt(sc.rootDir, filepath.Base(layout.PodsDir()), c.settled)
	// The pods' stamps are checked at most every stampEvery: a scan for a
	// mount change soon after one that checked them re-reads only the
	// pods the change lies in (and new ones), and publishes sooner.
	stamp := full || now.Sub(c.lastStamped) >= c.stampEvery
	if stamp {
		c.lastStamped = now
	}
	if !full && (podsStamp.missing || podsStamp.ino != c.podsStamp.ino || podsStamp.dev != c.podsStamp.dev) {
		// Another pods directory (or root): nothing kept is about it.
		full, podsChanged = true, true
		c.pods = map[string]*podScan{}
	}
	if !full {
		podsChanged = !c.podsSettled || podsStamp != c.podsStamp
		for _, uid := range c.order {
			p := c.pods[uid]
			if dirty[uid] || !p.settled {
				dirty[uid] = true
				continue
			}
			if !stamp {
				continue
			}
			if stamps, settled := c.stampPod(sc.pods, uid, p.stamps); !settled || !slices.Equal(stamps, p.stamps) {
				dirty[uid] = true
			}
		}
	}
	if full {
		c.pods = map[string]*podScan{}
	}
	if full || podsChanged || len(dirty) > 0 {
		pick := func(uid string) bool { return full || dirty[uid] || c.pods[uid] == nil }
		found, err := layout.ScanVolumes(c.limits, volume.OnlyPods(pick))
		if err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		if !full && found.Share != c.share {
			// Pods came or went and every pod's share changed: each
			// pod's listing may end elsewhere now.
			full = true
			c.pods = map[string]*podScan{}
			if found, err = layout.ScanVolumes(c.limits); err != nil {
				return nil, fmt.Errorf("list volumes: %w", err)
			}
		}
		c.examinePods(sc, found, full)
		c.podsStamp, c.podsSettled = podsStamp, !podsStamp.unsettled
	}
	if full {
		c.lastFull = now
	}
	c.root, c.tab = root, tab
	c.last.full = full
	return c.report(root), nil
}

// attribute marks in dirty the pods that changes can affect, and reports
// whether one can affect every pod (it is at or above the pods
// directory, named realPods in the table).
func (c *incrementalScan) attribute(changes []mountdetect.MountChange, tab *mountdetect.MountTable, realPods string, dirty map[string]bool) (all bool) {
	podOf := func(p string) (uid string, above bool) {
		if p == realPods || strings.HasPrefix(realPods, strings.TrimSuffix(p, "/")+"/") {
			return "", true
		}
		rest, ok := strings.CutPrefix(p, realPods+"/")
		if !ok {
			return "", false
		}
		uid, _, _ = strings.Cut(rest, "/")
		return uid, false
	}
	for _, ch := range changes {
		for _, p := range ch.Paths {
			uid, above := podOf(p)
			if above {
				return true
			}
			if uid != "" {
				dirty[uid] = true
			}
		}
		for _, p := range ch.Within {
			if uid, _ := podOf(p); uid != "" {
				dirty[uid] = true
			}
		}
		if (ch.FSType == "tmpfs" || ch.FSType == "hugetlbfs") && ch.Source != ch.FSType && ch.Source != "none" && ch.Source != "" {
			for _, t := range []*mountdetect.MountTable{tab, c.tab} {
				for _, m := range t.MountsFromSource(ch.Source) {
					if uid, _ := podOf(m.MountPoint); uid != "" {
						dirty[uid] = true
					}
				}
			}
		}
	}
	return false
}

// examinePods examines the volumes found lists (of the pods it picked)
// and keeps what each pod gave; with full, the pods it did not list are
// forgotten.
func (c *incrementalScan) examinePods(sc *rootScanner, found volume.ScanResult, full bool) {
	listed := map[string]bool{}
	for uid := range found.Budgets {
		listed[uid] = true
	}
	podsDir := sc.layout.PodsDir()
	podOf := func(path string) string {
		rest, ok := strings.CutPrefix(path, podsDir+"/")
		if !ok {
			return ""
		}
		uid, _, _ := strings.Cut(rest, "/")
		if !listed[uid] {
			return ""
		}
		return uid
	}
	fresh := make(map[string]*podScan, len(listed))
	for uid := range listed {
		fresh[uid] = &podScan{}
	}
	c.last.podsReexamined = len(listed)
	// Each pod's volumes are examined into its own report (ScanVolumes
	// lists them pod by pod), which it keeps: no copy of the whole
	// node's verdicts is made on the way.
	var rep scanReport
	for vols := found.Volumes; len(vols) > 0; {
		uid := vols[0].PodUID
		n := 1
		for n < len(vols) && vols[n].PodUID == uid {
			n++
		}
		p := fresh[uid]
		if p == nil { // not a pod listed: cannot be, but never lose a volume
			p = &podScan{}
			fresh[uid] = p
		}
		pr := scanReport{volumes: p.volumes}
		sc.examine(&pr, vols[:n], found.Budgets)
		p.volumes = slices.Clip(pr.volumes)
		rep.problems = append(rep.problems, pr.problems...)
		rep.overBudget = append(rep.overBudget, pr.overBudget...)
		vols = vols[n:]
	}
	c.podsProblems = c.podsProblems[:0]
	for _, p := range found.Problems {
		sp := newScanProblem(p.Path, p.Err)
		if uid := podOf(p.Path); uid != "" && p.Path != podsDir+"/"+uid {
			fresh[uid].problems = append(fresh[uid].problems, sp)
			continue
		}
		c.podsProblems = append(c.podsProblems, sp)
	}
	for _, p := range rep.problems { // where a budget stopped a subPath tree
		if uid := podOf(p.Problem); uid != "" {
			fresh[uid].problems = append(fresh[uid].problems, p)
		} else {
			c.podsProblems = append(c.podsProblems, p)
		}
	}
	for _, l := range found.Leftovers {
		if uid := podOf(l); uid != "" {
			fresh[uid].leftover = l
		}
	}
	for _, o := range slices.Concat(found.OverBudget, rep.overBudget) {
		if uid := podOf(o); uid != "" {
			fresh[uid].overBudget = o
		}
	}
	// Stamped after the listing: a change during it leaves a ctime too
	// recent to count (settleAfter), and the pod is read again next time.
	for uid, p := range fresh {
		p.stamps, p.settled = c.stampPod(sc.pods, uid, nil)
		if p.overBudget != "" {
			p.settled = false // read again within its share, every scan
		}
		c.pods[uid] = p
	}
	c.order = found.Pods
	c.share = found.Share
	c.lastReport = nil
	present := make(map[string]bool, len(c.order))
	for _, uid := range c.order {
		present[uid] = true
	}
	for uid := range c.pods {
		if !present[uid] {
			delete(c.pods, uid)
		}
	}
}

// report is the scan report the kept state makes. Its callers only read
// it: it is the same until a pod is read again.
func (c *incrementalScan) report(root string) *scanReport {
	if c.lastReport != nil && c.lastReport.root == root {
		return c.lastReport
	}
	n := 0
	for _, p := range c.pods {
		n += len(p.volumes)
	}
	s := &scanReport{root: root, volumes: make([]*scanVolume, 0, n)}
	s.problems = append(s.problems, c.podsProblems...)
	for _, p := range c.podsProblems {
		if p.OverBudget {
			s.incomplete = true
		}
	}
	for _, uid := range c.order {
		p := c.pods[uid]
		if p == nil {
			continue
		}
		start := len(s.volumes)
		s.volumes = append(s.volumes, p.volumes...)
		p.volumes = s.volumes[start:len(s.volumes):len(s.volumes)]
		s.problems = append(s.problems, p.problems...)
		if p.leftover != "" {
			s.leftovers = append(s.leftovers, scanLeftover{Leftover: p.leftover})
		}
		if p.overBudget != "" {
			s.overBudget = append(s.overBudget, p.overBudget)
			s.incomplete = true
		}
	}
	slices.Sort(s.overBudget)
	c.lastReport = s
	return s
}

// settled reports whether a ctime is old enough for nothing to have
// changed since without changing it (settleAfter), and not in the future.
func (c *incrementalScan) settled(ctime unix.Timespec) bool {
	t := time.Unix(ctime.Unix())
	age := c.now().Sub(t)
	return age >= c.settleAfter
}

// stampAt is the stamp of the entry name of d (not followed).
func stampAt(d *fsat.Dir, name string, settled func(unix.Timespec) bool) dirStamp {
	st, err := d.Lstat(name)
	return newStamp(name, st, err, settled)
}

func newStamp(name string, st unix.Stat_t, err error, settled func(unix.Timespec) bool) dirStamp {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return dirStamp{name: name, missing: true}
	case err != nil:
		return dirStamp{name: name, unsettled: true}
	}
	return dirStamp{name: name, dev: st.Dev, ino: st.Ino, mode: st.Mode & unix.S_IFMT, ctime: st.Ctim, unsettled: !settled(st.Ctim)}
}

// stampPod stamps the directories whose entries make the pod uid's list
// of volumes: its volumes directory and each plugin directory, reached by
// descriptors without following a symlink or crossing a mount (the
// volumes directory replaced is another inode). settled is false when a
// stamp cannot prove that nothing changed (a recent ctime, an error, a
// volumes directory holding more entries than one directory may give a
// scan). When the volumes directory's stamp is prev's first (settled),
// its entries are prev's: only the plugin directories are stamped again.
func (c *incrementalScan) stampPod(pods *fsat.Dir, uid string, prev []dirStamp) (stamps []dirStamp, settled bool) {
	vols, err := pods.OpenDir(uid+"/volumes", fsat.SameMount)
	if errors.Is(err, fs.ErrNotExist) {
		return []dirStamp{{name: "volumes", missing: true}}, true
	}
	if err != nil {
		return nil, false
	}
	defer vols.Close()
	st, err := vols.Stat()
	v := newStamp("volumes", st, err, c.settled)
	stamps = append(stamps, v)
	settled = !v.unsettled
	if settled && len(prev) > 0 && prev[0] == v {
		for _, p := range prev[1:] {
			s := stampAt(vols, p.name, c.settled)
			settled = settled && !s.unsettled
			stamps = append(stamps, s)
		}
		return stamps, settled
	}
	var names []string
	err = vols.EachEntry(func(e fsat.Entry) error {
		if c.limits.Dir > 0 && len(names) >= c.limits.Dir {
			return fsat.ErrStop
		}
		names = append(names, e.Name)
		return nil
	})
	if err != nil || (c.limits.Dir > 0 && len(names) >= c.limits.Dir) {
		settled = false
	}
	slices.Sort(names)
	for _, n := range names {
		s := stampAt(vols, n, c.settled)
		settled = settled && !s.unsettled
		stamps = append(stamps, s)
	}
	return stamps, settled
}

// newServeScan is serve's scan: incremental, with a whole scan at least
// every fullEvery and the pods' directories stamped at least every
// stampEvery.
func newServeScan(clk clock.PassiveClock, fullEvery, stampEvery time.Duration, opts ...emptydir.Option) func(string) (*scanReport, error) {
	c := newIncrementalScan(clk, fullEvery, stampEvery)
	c.emptyDirOpts = opts
	return c.scan
}
