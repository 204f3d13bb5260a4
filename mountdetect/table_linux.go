package mountdetect

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

type tableEntry struct {
	Mount
	id, parent int
	dev        uint64 // the filesystem's major:minor, as the table gives it
	root       string // the mount's root within its filesystem
	// vfsOptions and fsOptions are the per-mount and superblock options,
	// kept apart: joining them would cost a string per mount and read.
	vfsOptions, fsOptions string
	optional              string // the optional fields: propagation ("shared:1 master:2")
}

// placed is a mount located by where its mount point is in the filesystem
// holding it: pos is the mount point's path from that filesystem's root,
// whichever mount of it the mount was made through.
type placed struct {
	pos string
	i   int // index into entries
}

type mountTableData struct {
	entries  []tableEntry // sorted by mount point, stable in table order
	byID     map[int]int  // mount ID -> index into entries
	children map[int][]int
	// byDev holds, per filesystem (device), the mounts whose mount point
	// is on it, sorted by pos: one binary search finds every mount on a
	// directory's subtree, through whichever mount of the filesystem
	// (a second bind mount of it, say) each was made.
	byDev map[uint64][]placed
	// bySource indexes entries by source (MountsFromSource: a scan asks
	// it of every emptyDir with a mount record).
	bySource map[string][]int
	// unique lists the unique IDs of the namespace's mounts (increasing),
	// listed just before the table was read; nil where the kernel cannot
	// list them (ChangesSince then compares lines alone).
	unique []uint64
}

func readMountTable() (*MountTable, error) {
	// Listed first: a mount replaced after the listing and before the
	// read is a new unique ID at the next read, never one missed.
	unique, err := fsat.ListMounts()
	if err != nil && !errors.Is(err, fsat.ErrUnsupported) {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	t := &MountTable{}
	t.unique = unique
	t.entries = make([]tableEntry, len(infos))
	for i, m := range infos {
		t.entries[i] = tableEntry{
			Mount:      Mount{MountPoint: m.Mountpoint, FSType: m.FSType, Source: m.Source},
			id:         m.ID,
			parent:     m.Parent,
			dev:        unix.Mkdev(uint32(m.Major), uint32(m.Minor)),
			root:       m.Root,
			vfsOptions: m.VFSOptions,
			fsOptions:  m.Options,
			optional:   m.Optional,
		}
	}
	slices.SortStableFunc(t.entries, func(a, b tableEntry) int { return strings.Compare(a.MountPoint, b.MountPoint) })
	t.byID = make(map[int]int, len(t.entries))
	t.bySource = make(map[string][]int)
	for i, e := range t.entries {
		t.byID[e.id] = i
		t.bySource[e.Source] = append(t.bySource[e.Source], i)
	}
	t.children = make(map[int][]int)
	t.byDev = make(map[uint64][]placed)
	for i, e := range t.entries {
		pi, ok := t.byID[e.parent]
		if !ok || e.parent == e.id {
			continue // the namespace's root mount
		}
		t.children[e.parent] = append(t.children[e.parent], i)
		p := t.entries[pi]
		if pos, ok := p.position(pathOf(e.MountPoint)); ok {
			t.byDev[p.dev] = append(t.byDev[p.dev], placed{pos: pos.String(), i: i})
		}
	}
	for _, ps := range t.byDev {
		slices.SortFunc(ps, func(a, b placed) int { return strings.Compare(a.pos, b.pos) })
	}
	return t, nil
}

// position is where path, a path at or beneath the mount point of e, lies
// in e's filesystem: e's root joined with the rest of path.
func (e *tableEntry) position(path joinedPath) (joinedPath, bool) {
	rest, ok := path.cutDir(e.MountPoint)
	if !ok {
		return joinedPath{}, false
	}
	if e.root == "/" {
		if rest.n == 1 && rest.parts[0] == "" {
			return pathOf("/"), true
		}
		return rest, true
	}
	return rest.under(e.root), true
}

// byMountID is the table's entry for the mount with the (classic) ID id.
func (t *MountTable) byMountID(id int) (*tableEntry, bool) {
	if t == nil {
		return nil, false
	}
	i, ok := t.byID[id]
	if !ok {
		return nil, false
	}
	return &t.entries[i], true
}

// mountedOn reports whether anything is mounted on path.
func (t *MountTable) mountedOn(path string) bool {
	p := pathOf(path)
	from, to := t.at(&p, 0, len(t.entries))
	return from < to
}

// mountsAt returns the mounts whose mount point is the directory open as fd
// (named real by the kernel), in table order, and every other mount whose
// mount point is that directory or lies beneath it, sorted by mount point.
// The second list is found three ways:
//
//   - by path: mount points beneath real;
//   - by filesystem position: mounts whose mount point is the directory or
//     an entry beneath it, made through another mount of the same
//     filesystem (a second bind mount of a parent directory). The table
//     lists them under that other path, but the kernel refuses to rmdir or
//     unlink their mount point (EBUSY), and a walk through real would
//     meet the directory they cover. This needs the directory's mount ID
//     (statx STATX_MNT_ID, Linux 5.8);
//   - mounts made on or inside any mount found so far.
func (t *MountTable) mountsAt(fd int, real joinedPath, st *fsat.MountStat) (at, beneath []Mount) {
	return t.mountsAtWithin(fd, real, st, nil)
}

// at is the range of entries[lo:hi] whose mount point is path (sorted,
// they are together).
func (t *MountTable) at(path *joinedPath, lo, hi int) (from, to int) {
	return atRange(path, lo, hi, func(i int) string { return t.entries[i].MountPoint })
}

// beneath is the range of entries[lo:hi] whose mount points lie beneath
// dir: sorted, they are together, right after dir+"/" (not right after
// dir: "dir-2" sorts between). Both ends are binary searches, so the
// mounts someone made there do not make it cost more.
func (t *MountTable) beneath(dir *joinedPath, lo, hi int) (from, to int) {
	return beneathRange(dir, lo, hi, func(i int) string { return t.entries[i].MountPoint })
}

// placedAt is at for positions in ps[lo:hi], sorted by pos.
func placedAt(ps []placed, path *joinedPath, lo, hi int) (from, to int) {
	return atRange(path, lo, hi, func(i int) string { return ps[i].pos })
}

// placedBeneath is beneath for positions in ps[lo:hi], sorted by pos.
func placedBeneath(ps []placed, dir *joinedPath, lo, hi int) (from, to int) {
	return beneathRange(dir, lo, hi, func(i int) string { return ps[i].pos })
}

// atRange is at of the sorted strings key(lo)..key(hi-1).
func atRange(path *joinedPath, lo, hi int, key func(int) string) (from, to int) {
	from = lo + sort.Search(hi-lo, func(i int) bool { return path.compare(key(lo+i)) >= 0 })
	to = from + sort.Search(hi-from, func(i int) bool { return path.compare(key(from+i)) != 0 })
	return from, to
}

// beneathRange is beneath of the sorted strings key(lo)..key(hi-1).
func beneathRange(dir *joinedPath, lo, hi int, key func(int) string) (from, to int) {
	from = lo + sort.Search(hi-lo, func(i int) bool { return dir.compareWithDir(key(lo+i)) >= 0 })
	to = from + sort.Search(hi-from, func(i int) bool { return !dir.isBeneath(key(from + i)) })
	return from, to
}

// entries is where in a table of n entries w says to search (w nil:
// everywhere).
func (w *window) entries(n int) (lo, hi int) {
	if w == nil {
		return 0, n
	}
	return w.lo, w.hi
}

// positions is where in the n positions of the filesystem dev w says to
// search (w nil, without a position, or of another filesystem:
// everywhere).
func (w *window) positions(dev uint64, n int) (lo, hi int) {
	if w == nil || w.phi < 0 || w.dev != dev {
		return 0, n
	}
	return w.plo, w.phi
}

// mountsAtWithin is mountsAt searching only in (nil: the whole table),
// which must hold every mount at or beneath real.
func (t *MountTable) mountsAtWithin(fd int, real joinedPath, st *fsat.MountStat, in *window) (at, beneath []Mount) {
	lo, hi := in.entries(len(t.entries))
	// found holds indexes into entries, on the stack while they are few:
	// most directories a scan asks about have no mount beneath them.
	var buf [8]int
	found := buf[:0]
	from, to := t.at(&real, lo, hi)
	for i := from; i < to; i++ {
		at = append(at, t.entries[i].Mount)
		found = append(found, i)
	}
	// Mount points beneath real sort right after real+"/" (not right after
	// real: "real-2" sorts between them).
	dir := real.trimSlash()
	from, to = t.beneath(&dir, lo, hi)
	for i := from; i < to; i++ {
		found = append(found, i)
	}
	if pos, dev, ok := t.positionOf(fd, real, st); ok {
		// Searched as by path: the mounts on pos, then those beneath it,
		// which sort right after pos+"/" (not after pos).
		ps := t.byDev[dev]
		plo, phi := in.positions(dev, len(ps))
		from, to := placedAt(ps, &pos, plo, phi)
		for _, p := range ps[from:to] {
			found = append(found, p.i)
		}
		posDir := pos.trimSlash()
		from, to = placedBeneath(ps, &posDir, plo, phi)
		for _, p := range ps[from:to] {
			found = append(found, p.i)
		}
	}
	if len(found) == 0 {
		return at, nil
	}
	// Mounts on top of or inside those found are beneath the directory
	// too. Each mount has one parent: one not found above is reached
	// once, from it.
	slices.Sort(found)
	found = slices.Compact(found)
	direct := len(found)
	for q := 0; q < len(found); q++ {
		for _, c := range t.children[t.entries[found[q]].id] {
			if _, ok := slices.BinarySearch(found[:direct], c); !ok {
				found = append(found, c)
			}
		}
	}
	// Entries are sorted by mount point, stable in table order: so are
	// the mounts in the order of their indexes.
	slices.Sort(found)
	if n := len(found) - len(at); n > 0 { // every mount on real is in at
		beneath = make([]Mount, 0, n)
	}
	for _, i := range found {
		if real.compare(t.entries[i].MountPoint) != 0 {
			beneath = append(beneath, t.entries[i].Mount)
		}
	}
	return at, beneath
}

// compareWithDir compares s with dir+"/" (strings.Compare's order)
// without making that string: a scan asks it of every volume directory.
func compareWithDir(s, dir string) int {
	k := min(len(s), len(dir))
	if c := strings.Compare(s[:k], dir[:k]); c != 0 {
		return c
	}
	switch {
	case len(s) <= len(dir):
		return -1 // s is dir or a proper prefix of it: shorter than dir+"/"
	case s[len(dir)] < '/':
		return -1
	case s[len(dir)] > '/':
		return 1
	case len(s) == len(dir)+1:
		return 0
	}
	return 1
}

// isBeneath reports whether s starts with dir+"/".
func isBeneath(s, dir string) bool {
	return len(s) > len(dir) && s[len(dir)] == '/' && s[:len(dir)] == dir
}

// positionOf is where the directory open as fd (named real) lies in its
// filesystem, found through its mount's table entry; st, when not nil,
// is fd's mount as statx gave it (its classic ID is used).
func (t *MountTable) positionOf(fd int, real joinedPath, st *fsat.MountStat) (pos joinedPath, dev uint64, ok bool) {
	if st == nil {
		s, err := fsat.StatMount(fd, "", fsat.TableID)
		if err != nil {
			return joinedPath{}, 0, false
		}
		st = &s
	}
	e, ok := t.byMountID(int(st.ID))
	if !ok {
		return joinedPath{}, 0, false // mounted after the table was read
	}
	pos, ok = e.position(real)
	return pos, e.dev, ok
}

func (t *MountTable) nestedMounts(path string) ([]Mount, error) {
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	real, err := fdPath(fd, path)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	_, beneath := t.mountsAt(fd, pathOf(real), nil)
	return beneath, nil
}

// hugePageSizeOf reads the pagesize= option of the hugetlbfs mount fd is
// on, found by the mount ID statx reports; 0 when the mount has no such
// option, or is not in the table (mounted after it was read). st, when
// not nil, is fd's mount as statx gave it.
func (t *MountTable) hugePageSizeOf(fd int, path string, st *fsat.MountStat) (int64, error) {
	var e *tableEntry
	var err error
	if st == nil {
		var s fsat.MountStat
		s, err = fsat.StatMount(fd, "", fsat.TableID)
		st = &s
	}
	if err == nil {
		var ok bool
		if e, ok = t.byMountID(int(st.ID)); !ok {
			return 0, nil
		}
	} else {
		// Without mount IDs take the last (topmost) hugetlbfs mount on
		// the longest mount point that contains the path.
		real, err := fdPath(fd, path)
		if err != nil {
			return 0, err
		}
		for i := range t.entries {
			c := &t.entries[i]
			if c.FSType == "hugetlbfs" && within(real, c.MountPoint) && (e == nil || len(c.MountPoint) >= len(e.MountPoint)) {
				e = c
			}
		}
		if e == nil {
			return 0, nil
		}
	}
	size, _, err := e.hugePageSize()
	if err != nil {
		return 0, fmt.Errorf("hugetlbfs mount %s: %w", e.MountPoint, err)
	}
	return size, nil
}

// hugePageSize is ParseHugePageSize of e's options, per-mount then
// superblock: the first pagesize= of the two.
func (e *tableEntry) hugePageSize() (size int64, ok bool, err error) {
	if size, ok, err = ParseHugePageSize(e.vfsOptions); ok {
		return size, ok, err
	}
	return ParseHugePageSize(e.fsOptions)
}

func (t *MountTable) fromSource(source string) []SourceMount {
	var out []SourceMount
	for _, i := range t.bySource[source] { // in table order
		e := &t.entries[i]
		m := SourceMount{Mount: e.Mount, ID: e.id, Root: e.root, Dev: e.dev}
		if e.FSType == "hugetlbfs" {
			m.HugePageSize, _, _ = e.hugePageSize()
		}
		out = append(out, m)
	}
	return out
}
