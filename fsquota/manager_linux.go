package fsquota

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/internal/base/testhook"
	"github.com/nodevol/nodevol/mountdetect"
)

func (m *Manager) quota() quotaBackend { return m.backend }

func defaultBackend() quotaBackend { return &kernelQuota{} }

func testKernel(k testhook.QuotaKernel) quotaBackend { return testQuota{k} }

// testQuota is withTestKernel's backend: accounting and enforcement on
// everywhere, no usage, limits kept by the test's QuotaKernel.
type testQuota struct{ k testhook.QuotaKernel }

func (testQuota) state(*fsRef) (quotaState, error) {
	return quotaState{accounting: true, enforcing: true}, nil
}

func (q testQuota) get(_ *fsRef, id uint32) (dquot, error) {
	hard, err := q.k.Limit(id)
	return dquot{hardBytes: hard}, err
}

func (q testQuota) setLimit(_ *fsRef, id uint32, hard int64) error { return q.k.SetLimit(id, hard) }

// cleanPath makes path absolute and clean: it is what the projects file
// records.
func cleanPath(path string) (string, error) {
	if path == "" {
		return "", &os.PathError{Op: "fsquota", Path: path, Err: unix.EINVAL}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return abs, nil
}

// openPath opens the directory at path (resolved like any path, a final
// symlink not followed) and describes it: for the path-taking calls,
// which callers use on trusted paths.
func (m *Manager) openPath(path string) (*fsRef, error) {
	fd, err := openNoFollow(path, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return describeOwned(fd, path)
}

// ref describes the directory open as dirFd, which the caller keeps: its
// filesystem, mount and identity. An O_PATH descriptor (which the fsxattr
// ioctls refuse) is reopened through its magic link: the same directory,
// never a name resolved again.
func ref(dirFd int, path string) (*fsRef, error) {
	fl, err := unix.FcntlInt(uintptr(dirFd), unix.F_GETFL, 0)
	if err != nil {
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	if fl&unix.O_PATH == 0 {
		return describe(dirFd, path)
	}
	fd, err := fsat.Reopen(dirFd, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return describeOwned(fd, path)
}

// describeOwned is describe of a descriptor the fsRef then owns (closes),
// closed here if describe fails.
func describeOwned(fd int, path string) (*fsRef, error) {
	r, err := describe(fd, path)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	r.owned = true
	return r, nil
}

// describe learns the filesystem, mount and identity of the directory open
// as fd.
func describe(fd int, path string) (*fsRef, error) {
	r := &fsRef{fd: fd, path: path}
	var sfs unix.Statfs_t
	if err := fsat.Retry(func() error { return unix.Fstatfs(fd, &sfs) }); err != nil {
		return nil, &os.PathError{Op: "fstatfs", Path: path, Err: err}
	}
	r.magic = uint32(sfs.Type)
	if s, err := fsat.StatMount(fd, "", fsat.MountKey); err == nil {
		r.dev, r.ino, r.mode = s.Dev, s.Ino, s.Mode
		r.key.mntID, r.key.unique = s.Key(), s.UniqueID != 0
	} else {
		// No statx, or no mount IDs (Linux < 5.8): the support cache is
		// keyed by the device alone.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
		}
		r.dev, r.ino, r.mode = uint64(st.Dev), st.Ino, st.Mode
	}
	if r.mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, &os.PathError{Op: "fsquota", Path: path, Err: unix.ENOTDIR}
	}
	r.key.dev = r.dev
	// The generation where the filesystem keeps one (XFS and ext4 do);
	// 0, "unknown", elsewhere.
	if gen, err := generation(fd); err == nil {
		r.gen = gen
	}
	return r, nil
}

// is reports whether r is the directory p identifies: the same inode
// number and generation (the device number where there is no generation;
// it may change across boots, generations do not); a p without an
// identity (recorded before Project had one) accepts any.
func (r *fsRef) is(p *Project) bool {
	switch {
	case p.Ino == 0:
		return true
	case r.ino != p.Ino:
		return false
	case p.Gen != 0:
		return r.gen == p.Gen
	}
	return r.dev == p.Dev
}

// project is the Project Assign returns for r.
func (r *fsRef) project(id uint32) Project {
	return Project{ID: id, Dev: r.dev, Ino: r.ino, Gen: r.gen}
}

// close closes the descriptor r opened itself, never the caller's.
func (r *fsRef) close() {
	if r.owned {
		unix.Close(r.fd)
	}
}

// support answers whether r's filesystem has project quota accounting on,
// from the cache or the kernel.
func (m *Manager) support(r *fsRef) (quotaState, error) {
	if r.magic != magicXFS && r.magic != magicExt4 {
		return quotaState{}, &UnsupportedError{Path: r.path, Reason: mountdetect.FSTypeName(r.magic) + " is neither xfs nor ext4"}
	}
	m.mu.Lock()
	st, ok := m.cache[r.key]
	m.mu.Unlock()
	if ok {
		return st, nil
	}
	// On ext4, accounting comes from the filesystem's project and quota
	// features, not from a mount option (prjquota only adds enforcement).
	accountingOff := "project quota accounting is off (mount the filesystem with prjquota)"
	if r.magic == magicExt4 {
		accountingOff = "project quota accounting is off (ext4 needs the project and quota features: " + ext4Features + "; mount with prjquota to enforce limits)"
	}
	st, err := m.quota().state(r)
	if err != nil {
		if reason := unsupportedReason(err); reason != "" {
			if errors.Is(err, unix.ESRCH) {
				reason = accountingOff
			}
			return quotaState{}, &UnsupportedError{Path: r.path, Reason: reason, Err: err}
		}
		return quotaState{}, &ProjectError{Op: "check quota support", Path: r.path, Err: err}
	}
	if !st.accounting {
		return quotaState{}, &UnsupportedError{Path: r.path, Reason: accountingOff}
	}
	m.mu.Lock()
	m.cache[r.key] = st
	m.mu.Unlock()
	return st, nil
}

// quotaErr turns a failed quota call into the error to return: errnos that
// mean "no quotas here" drop the cached positive answer and become an
// *UnsupportedError.
func (m *Manager) quotaErr(r *fsRef, op string, id uint32, err error) error {
	if reason := unsupportedReason(err); reason != "" {
		m.mu.Lock()
		delete(m.cache, r.key)
		m.mu.Unlock()
		return &UnsupportedError{Path: r.path, Reason: reason, Err: err}
	}
	return &ProjectError{Op: op, Path: r.path, ProjectID: id, Err: err}
}

func (m *Manager) checkSupport(path string) error {
	path, err := cleanPath(path)
	if err != nil {
		return err
	}
	r, err := m.openPath(path)
	if err != nil {
		return err
	}
	defer r.close()
	_, err = m.support(r)
	return err
}

// owns reports whether project id on the directory recorded as path
// belongs to that directory: the projects file records it for path. An ID
// recorded nowhere is not adopted — whoever can write in the directory's
// parent may own the directory and tag it (FS_IOC_FSSETXATTR needs only
// ownership), and nothing may then make its ID nodevol's to limit or to
// clear.
func owns(p *projectsFile, id uint32, path string) bool {
	return id != 0 && slices.Contains(p.pathsForID(id), path)
}

func (m *Manager) assign(dirFd int, path string, limitBytes int64) (Project, error) {
	path, err := cleanPath(path)
	if err != nil {
		return Project{}, err
	}
	if !validEntryPath(path) {
		return Project{}, &ProjectError{Op: "assign", Path: path, Err: errors.New("the path cannot be recorded in a projects file")}
	}
	r, err := ref(dirFd, path)
	if err != nil {
		return Project{}, err
	}
	defer r.close()
	st, err := m.support(r)
	if err != nil {
		return Project{}, err
	}
	x, err := getFsxattr(r.fd)
	if err != nil {
		return Project{}, fsxattrErr(path, "FS_IOC_FSGETXATTR", err)
	}

	t, err := m.begin()
	if err != nil {
		return Project{}, &ProjectError{Op: "assign", Path: path, Err: err}
	}
	defer t.close()

	var id uint32
	switch recorded, isRecorded := t.projects.idForPath(path); {
	case owns(t.projects, x.Projid, path):
		id = x.Projid
		m.log.V(2).Info("Adopting the directory's project ID", "path", path, "projectID", id)
	case isRecorded:
		// Recorded, but the directory was never tagged (or lost its tag).
		id = recorded
		m.log.V(2).Info("Reusing the recorded project ID", "path", path, "projectID", id)
	default:
		if id, err = m.allocate(r, t); err != nil {
			return Project{}, err
		}
		m.log.V(2).Info("Allocated project ID", "path", path, "projectID", id, "previous", x.Projid)
	}
	fail := func(err error) (Project, error) {
		return Project{}, &ProjectError{Op: "assign", Path: path, ProjectID: id, Err: err}
	}

	// Bookkeeping first (projects, then projid), so that a crash at any
	// point leaves a state the next Assign or Clear completes.
	if changed, err := t.projects.add(id, path); err != nil {
		return fail(err)
	} else if changed {
		if err := t.writeProjects(); err != nil {
			return fail(err)
		}
	}
	if changed, err := t.projid.add(m.nameFor(id), id); err != nil {
		return fail(err)
	} else if changed {
		if err := t.writeProjid(); err != nil {
			return fail(err)
		}
	}

	m.hook.At(testhook.QuotaRecorded, path)

	var hard int64
	if m.enforce && limitBytes > 0 {
		hard = limitBytes
		if !st.enforcing {
			m.log.Info("Project quota limit set but not enforced: the filesystem is mounted without enforcement (pqnoenforce)", "path", path, "projectID", id)
		}
	}
	if err := m.quota().setLimit(r, id, hard); err != nil {
		return Project{}, m.quotaErr(r, "set limit", id, err)
	}
	m.hook.At(testhook.QuotaLimited, path)
	if err := setFdProjectID(r.fd, true, id); err != nil {
		return fail(setFsxattrErr(r.fd, path, err))
	}
	return r.project(id), nil
}

// allocate finds an ID that neither file records and that has no usage
// and no limits, probing at most maxProbes IDs: the lowest ones from
// firstID with half of them, as the kubelet and xfs_quota users expect,
// then random ones from the rest of the range. Whoever can tag files may
// make a run of consecutive IDs look used (a container's root can, outside
// a user namespace), but not a noticeable share of four billion: one pod
// cannot make allocation fail for the others.
func (m *Manager) allocate(r *fsRef, t *tx) (uint32, error) {
	probes := 0
	recorded := func(id uint32) bool {
		return t.projects.hasID(id) || t.projid.hasID(id) || t.projid.hasName(m.nameFor(id))
	}
	probe := func(id uint32) (bool, error) {
		probes++
		d, err := m.quota().get(r, id)
		if err != nil {
			return false, m.quotaErr(r, "allocate", id, err)
		}
		if !d.unused() {
			m.log.V(3).Info("Skipping project ID in use", "projectID", id, "bytes", d.bytes, "inodes", d.inodes)
		}
		return d.unused(), nil
	}
	sequential := (m.maxProbes + 1) / 2
	for id := m.firstID; id >= m.firstID && id <= maxProjectID && probes < sequential; id++ {
		if recorded(id) {
			continue
		}
		if ok, err := probe(id); err != nil {
			return 0, err
		} else if ok {
			return id, nil
		}
	}
	for tries := 0; probes < m.maxProbes && tries < 4*m.maxProbes; tries++ {
		id := m.firstID + rand.Uint32N(maxProjectID-m.firstID+1)
		if recorded(id) {
			continue
		}
		if ok, err := probe(id); err != nil {
			return 0, err
		} else if ok {
			return id, nil
		}
	}
	return 0, &ProjectError{Op: "allocate", Path: r.path, Err: fmt.Errorf("%w: probed %d IDs from %d", ErrNoFreeID, probes, m.firstID)}
}

// clear is Clear, or Release when p is nil: then dirFd is only where the
// limits are cleared, never a directory to untag.
func (m *Manager) clear(dirFd int, path string, p *Project) error {
	path, err := cleanPath(path)
	if err != nil {
		return err
	}
	var r *fsRef
	if dirFd >= 0 {
		if r, err = ref(dirFd, path); err != nil {
			return &ProjectError{Op: "clear", Path: path, Err: err}
		}
		defer r.close()
	}
	t, err := m.begin()
	if err != nil {
		return &ProjectError{Op: "clear", Path: path, Err: err}
	}
	defer t.close()

	// Only what the files record for path is released: they are
	// nodevol's, unlike the directory (its owner can tag it) or p (from
	// a record its caller keeps, perhaps where others write).
	released := map[uint32]bool{}
	for _, id := range t.projects.idsForPath(path) {
		released[id] = true
	}
	if r != nil && len(released) > 0 {
		if err := m.clearDir(r, path, p, released); err != nil {
			return err
		}
	}

	m.hook.At(testhook.QuotaUntagged, path)

	// projid first, then projects: until the projects entry is gone a
	// repeated Clear finds the work to finish, and allocation skips the ID.
	projectsChanged := len(t.projects.removePath(path)) > 0
	projidChanged := false
	for id := range released {
		if !t.projects.hasID(id) && t.projid.removeID(id) {
			projidChanged = true
		}
	}
	if projidChanged {
		if err := t.writeProjid(); err != nil {
			return &ProjectError{Op: "clear", Path: path, Err: err}
		}
	}
	if projectsChanged {
		if err := t.writeProjects(); err != nil {
			return &ProjectError{Op: "clear", Path: path, Err: err}
		}
	}
	for id := range released {
		m.log.V(2).Info("Released project ID", "path", path, "projectID", id)
	}
	return nil
}

// clearDir removes the limits of the released IDs on r's filesystem and,
// when p is given, takes the project off r if r is the directory p
// identifies and carries one of them. A directory that is not the
// assigned one keeps its project (its ID, its flags) whatever it is.
func (m *Manager) clearDir(r *fsRef, path string, p *Project, released map[uint32]bool) error {
	if _, err := m.support(r); err == nil {
		for _, id := range sortedIDs(released) {
			if err := m.quota().setLimit(r, id, 0); err != nil && !isUnsupported(m.quotaErr(r, "clear limit", id, err)) {
				return m.quotaErr(r, "clear limit", id, err)
			}
		}
	} else if !isUnsupported(err) {
		return err
	}
	if p == nil {
		return nil
	}
	x, err := getFsxattr(r.fd)
	if err != nil {
		if err := fsxattrErr(path, "FS_IOC_FSGETXATTR", err); !isUnsupported(err) {
			return &ProjectError{Op: "clear", Path: path, Err: err}
		}
		return nil
	}
	switch {
	case !released[x.Projid]:
	case !r.is(p):
		m.log.Info("Not clearing the project of a directory that replaced the assigned one", "path", path, "projectID", x.Projid, "inode", r.ino, "assignedInode", p.Ino)
	default:
		if err := setFdProjectID(r.fd, true, 0); err != nil {
			return &ProjectError{Op: "clear", Path: path, ProjectID: x.Projid, Err: fsxattrErr(path, "FS_IOC_FSSETXATTR", err)}
		}
	}
	return nil
}

func (m *Manager) usage(dirFd int, path string) (Usage, error) {
	r, err := ref(dirFd, path)
	if err != nil {
		return Usage{}, err
	}
	defer r.close()
	return m.usageOf(r)
}

func (m *Manager) usageOf(r *fsRef) (Usage, error) {
	if _, err := m.support(r); err != nil {
		return Usage{}, err
	}
	x, err := getFsxattr(r.fd)
	if err != nil {
		return Usage{}, fsxattrErr(r.path, "FS_IOC_FSGETXATTR", err)
	}
	if x.Projid == 0 {
		return Usage{}, &ProjectError{Op: "usage", Path: r.path, Err: ErrNoProject}
	}
	d, err := m.quota().get(r, x.Projid)
	if err != nil {
		return Usage{}, m.quotaErr(r, "usage", x.Projid, err)
	}
	return Usage{Bytes: d.bytes, Inodes: d.inodes, LimitBytes: d.hardBytes, ProjectID: x.Projid}, nil
}

func sortedIDs(set map[uint32]bool) []uint32 {
	ids := make([]uint32, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
