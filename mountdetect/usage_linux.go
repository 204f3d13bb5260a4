package mountdetect

import (
	"fmt"
	"hash/maphash"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// usage is DiskUsage's action: every directory and non-directory on the
// walk's mount is counted (a hard-linked inode once, as long as links can
// remember it), mounts are skipped and listed, and the first error stops
// the walk.
type usage struct {
	u     Usage
	query fsat.MountQuery // what statx is asked: the counted fields and the mount ID
	links linkSet
}

func (a *usage) count(sx *fsat.MountStat) {
	if sx.Nlink > 1 && sx.Mode != unix.S_IFDIR {
		switch a.links.add(sx) {
		case linkSeen:
			return
		case linkNotKept:
			a.u.UpperBound = true
		}
	}
	a.u.Inodes++
	a.u.Bytes += int64(sx.Blocks) * 512
}

// linkSet remembers the hard-linked inodes a walk met, up to max of them:
// an inoSet for the device met first (a walk stays on one mount, hence
// almost always on one device), a map by device and inode for the rest
// (btrfs subvolumes).
type linkSet struct {
	max   int
	dev   uint64 // the first device
	inos  inoSet
	other map[inodeKey]struct{}
}

type inodeKey struct{ dev, ino uint64 }

// linkAdded says what linkSet.add made of an inode.
type linkAdded int

const (
	linkNew     linkAdded = iota // first met, remembered
	linkSeen                     // met before
	linkNotKept                  // not met before as far as the set knows, and not remembered: it is full
)

func (s *linkSet) add(sx *fsat.MountStat) linkAdded {
	dev := sx.Dev
	if s.inos.len() == 0 && len(s.other) == 0 {
		s.dev = dev
	}
	full := s.inos.len()+len(s.other) >= s.max
	if dev == s.dev {
		switch {
		case s.inos.has(sx.Ino):
			return linkSeen
		case full:
			return linkNotKept
		}
		s.inos.insert(sx.Ino)
		return linkNew
	}
	k := inodeKey{dev, sx.Ino}
	if _, ok := s.other[k]; ok {
		return linkSeen
	}
	if full {
		return linkNotKept
	}
	if s.other == nil {
		s.other = map[inodeKey]struct{}{}
	}
	s.other[k] = struct{}{}
	return linkNew
}

// inoSet is a set of inode numbers in 8 bytes a slot: open addressing
// with linear probing in a power-of-two table kept at most 3/4 full, so
// 10.7 to 21 bytes an inode (a Go map of uint64 takes 18 to 36).
// MaxHardLinkedInodes of them fill a 1 MiB table. The hash is seeded at
// random per set, so whoever picks the inode numbers (a pod creating and
// deleting files) cannot make them collide.
type inoSet struct {
	slots []uint64 // 0: empty (inode 0, where a filesystem has one, is in zero)
	n     int      // non-zero inodes in slots
	zero  bool
	seed  maphash.Seed
}

func (s *inoSet) len() int {
	if s.zero {
		return s.n + 1
	}
	return s.n
}

func (s *inoSet) has(ino uint64) bool {
	if ino == 0 {
		return s.zero
	}
	if len(s.slots) == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	for i := maphash.Comparable(s.seed, ino) & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case ino:
			return true
		case 0:
			return false
		}
	}
}

// insert adds ino, which the set does not hold.
func (s *inoSet) insert(ino uint64) {
	if ino == 0 {
		s.zero = true
		return
	}
	if (s.n+1)*4 > len(s.slots)*3 {
		old := s.slots
		if old == nil {
			s.seed = maphash.MakeSeed()
		}
		s.slots = make([]uint64, max(2*len(old), 1024))
		for _, v := range old {
			if v != 0 {
				s.put(v)
			}
		}
	}
	s.put(ino)
	s.n++
}

func (s *inoSet) put(ino uint64) {
	mask := uint64(len(s.slots) - 1)
	i := maphash.Comparable(s.seed, ino) & mask
	for s.slots[i] != 0 {
		i = (i + 1) & mask
	}
	s.slots[i] = ino
}

func (a *usage) skip(path string) { a.u.Skipped = append(a.u.Skipped, Mount{MountPoint: path}) }

// entered counts a directory the walk opened.
func (a *usage) entered(w *walk, n *dirNode) bool {
	sx, err := fsat.StatMount(n.fd, "", a.query)
	if err != nil {
		w.abort(&os.PathError{Op: "statx", Path: n.path(), Err: err})
		return false
	}
	a.count(&sx)
	return true
}

// files counts a batch of n's non-directories, looked at by name.
func (a *usage) files(w *walk, n *dirNode, sc *scratch, files []fileEnt, subdir func(name []byte)) {
	for _, d := range files {
		sc.pace()
		name := string(d.name(sc.buf))
		// StatMount asks nothing of the filesystem: no effect on a local
		// one, and a FUSE mounted on a file here is not asked.
		sx, err := fsat.StatMount(n.fd, name, a.query)
		switch {
		case err == unix.ENOENT:
		case err != nil:
			w.abort(&os.PathError{Op: "statx", Path: n.child(name), Err: err})
			return
		case sx.Mode == unix.S_IFDIR:
			subdir(d.name(sc.buf)) // DT_UNKNOWN directory
		case sx.Key() != w.rootMnt && w.s.mountQuery() != 0:
			a.skip(n.child(name)) // a bind-mounted file
		case sx.Root:
			a.skip(n.child(name))
		default:
			a.count(&sx)
		}
	}
}

func (a *usage) mount(_ *walk, n *dirNode, name string) { a.skip(n.child(name)) }

// replaced: gone or replaced during the walk; not counted.
func (*usage) replaced(*walk, *dirNode, string) {}

func (*usage) failed(w *walk, _ *dirNode, _ string, err error) { w.abort(err) }

// denied: a directory that cannot be read cannot be counted.
func (*usage) denied(w *walk, _ *dirNode, _ string, err error) { w.abort(err) }

func (*usage) done(*walk, *dirNode) bool { return false }

// reopened resumes n's listing where the evicted fd had reached: what was
// listed before is not counted twice. (Directory offsets are cookies that
// stay valid across opens of the directory, as NFS export needs.)
func (*usage) reopened(_ *walk, n *dirNode) error {
	if _, err := unix.Seek(n.fd, n.off, io.SeekStart); err != nil {
		return &os.PathError{Op: "lseek", Path: n.path(), Err: err}
	}
	return nil
}

func diskUsage(path string, c *config) (Usage, error) {
	s := c.strategy
	if !s.walkSafe() {
		return Usage{}, fmt.Errorf("disk usage of %s: %w: the kernel offers neither statx mount IDs nor openat2", path, ErrUnsupported)
	}
	fd, err := fsat.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return Usage{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return diskUsageOpen(fd, path, s, c)
}

func diskUsageFile(dirFd int, path string, c *config) (Usage, error) {
	s := c.strategy
	if !s.walkSafe() {
		return Usage{}, fmt.Errorf("disk usage of %s: %w: the kernel offers neither statx mount IDs nor openat2", path, ErrUnsupported)
	}
	fd, err := fsat.Reopen(dirFd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return Usage{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return diskUsageOpen(fd, path, s, c)
}

// diskUsageOpen walks the directory open as fd, which it closes.
func diskUsageOpen(fd int, path string, s strategy, c *config) (Usage, error) {
	a := &usage{
		query: fsat.Usage | s.mountQuery(),
		links: linkSet{max: c.maxLinked},
	}
	if a.links.max <= 0 {
		a.links.max = MaxHardLinkedInodes
	}
	sx, err := statMount(fd, "", a.query)
	if err != nil {
		unix.Close(fd)
		return Usage{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	a.count(&sx)

	w := &walk{act: a, s: s, rootMnt: sx.Key(), maxOpen: c.maxOpen}
	if w.maxOpen <= 0 {
		w.maxOpen = defaultMaxOpen
	}
	// The pseudo-node above the start directory is never used: the start
	// directory is never evicted, nor removed from it.
	root := &dirNode{parent: &dirNode{fd: -1, shown: path}, name: path, fd: fd, depth: 1, shown: path}
	sc := getScratch()
	w.serial(root, sc) // closes every fd it holds
	putScratch(sc)
	if c.walked != nil {
		c.walked()
	}
	if errs, _ := w.errs.Errors(); len(errs) > 0 {
		return a.u, errs[0] // the walk stops at its first failure
	}
	sortMounts(a.u.Skipped)
	return a.u, nil
}
