package fsquota

import (
	"fmt"
	"sync"

	"github.com/go-logr/logr"

	"github.com/nodevol/nodevol/internal/base/friend"
	"github.com/nodevol/nodevol/internal/base/testhook"
)

// Defaults.
const (
	// DefaultProjectsFile and DefaultProjidFile are where xfs_quota and the
	// kubelet keep their project bookkeeping.
	DefaultProjectsFile = "/etc/projects"
	DefaultProjidFile   = "/etc/projid"
	// FirstProjectID is the first ID allocated, as in the kubelet: IDs
	// below it are left to administrators.
	FirstProjectID uint32 = 1048577
	// DefaultMaxProbes bounds how many candidate IDs one allocation checks
	// for usage before giving up with ErrNoFreeID.
	DefaultMaxProbes = 1024
	// maxProjectID is the largest valid ID (0xffffffff means "none").
	maxProjectID uint32 = 1<<32 - 2
)

// Manager assigns, reads and clears project quotas on directories. Its
// state is the directories' project IDs and the two bookkeeping files, so a
// new Manager (after a restart) picks up where an old one stopped. It is
// safe for concurrent use, and several processes may share the files.
type Manager struct {
	projectsFile string
	projidFile   string
	enforce      bool
	log          logr.Logger
	firstID      uint32
	maxProbes    int
	nameFor      func(id uint32) string

	backend quotaBackend  // the kernel, or a fake in tests
	hook    testhook.Hook // crash points for tests; nil otherwise

	mu    sync.Mutex
	cache map[mountKey]quotaState // positive support answers only
}

// Option configures a Manager.
type Option interface{ apply(*Manager) }

type optionFunc func(*Manager)

func (f optionFunc) apply(m *Manager) { f(m) }

// WithProjectsFile sets the projects (id:path) file, DefaultProjectsFile by
// default.
func WithProjectsFile(path string) Option {
	return optionFunc(func(m *Manager) { m.projectsFile = path })
}

// WithProjidFile sets the projid (name:id) file, DefaultProjidFile by
// default.
func WithProjidFile(path string) Option {
	return optionFunc(func(m *Manager) { m.projidFile = path })
}

// Enforce makes Assign set a hard block limit equal to the requested size.
// Without it the Manager only accounts (monitoring-only, like the kubelet):
// limits are set to 0, "none". XFS stops every writer at the limit (with
// ENOSPC); ext4 stops writers with EDQUOT but, like all VFS quotas, lets a
// process with CAP_SYS_RESOURCE (root; not a container with the default
// capabilities) write past it.
func Enforce() Option { return optionFunc(func(m *Manager) { m.enforce = true }) }

// WithLogger sets the logger (for example klog.FromContext(ctx)); by
// default nothing is logged.
func WithLogger(l logr.Logger) Option { return optionFunc(func(m *Manager) { m.log = l }) }

// WithFirstID sets the first ID allocation tries, FirstProjectID by
// default.
func WithFirstID(id uint32) Option { return optionFunc(func(m *Manager) { m.firstID = id }) }

// WithMaxProbes bounds the candidate IDs one allocation checks for usage,
// DefaultMaxProbes by default: half of them the lowest free ones from
// WithFirstID, the rest at random above. IDs recorded in the bookkeeping
// files are skipped without counting.
func WithMaxProbes(n int) Option { return optionFunc(func(m *Manager) { m.maxProbes = n }) }

// withTestHook makes Assign and Clear call h at their crash points
// (testhook.QuotaRecorded, QuotaLimited, QuotaUntagged), for nodevol's crash
// tests. Other nodevol packages reach it as friend.QuotaHook.
func withTestHook(h testhook.Hook) Option { return optionFunc(func(m *Manager) { m.hook = h }) }

// withTestKernel makes the Manager keep project limits in k instead of
// asking quotactl, with the fsxattr ioctls that tag directories still
// real: tests of code above fsquota (emptydir's crash tests) can then
// assign and clear projects on a kernel without quotas. Other nodevol
// packages reach it as friend.QuotaKernel.
func withTestKernel(k testhook.QuotaKernel) Option {
	return optionFunc(func(m *Manager) {
		if k != nil {
			m.backend = testKernel(k)
		}
	})
}

func init() {
	friend.QuotaHook = func(h testhook.Hook) any { return withTestHook(h) }
	friend.QuotaKernel = func(k testhook.QuotaKernel) any { return withTestKernel(k) }
}

// New returns a Manager.
func New(opts ...Option) *Manager {
	m := &Manager{
		projectsFile: DefaultProjectsFile,
		projidFile:   DefaultProjidFile,
		firstID:      FirstProjectID,
		maxProbes:    DefaultMaxProbes,
		nameFor:      func(id uint32) string { return fmt.Sprintf("volume%d", id) },
		cache:        map[mountKey]quotaState{},
		backend:      defaultBackend(),
	}
	for _, o := range opts {
		o.apply(m)
	}
	if m.firstID == 0 {
		m.firstID = 1
	}
	if m.maxProbes <= 0 {
		m.maxProbes = 1
	}
	return m
}

// Usage is what a project has charged to it.
type Usage struct {
	Bytes  int64 `json:"bytes"`
	Inodes int64 `json:"inodes"` // the directory itself included
	// LimitBytes is the hard block limit, 0 when none.
	LimitBytes int64 `json:"limitBytes"`
	// ProjectID is the project the numbers are for: the directory's.
	ProjectID uint32 `json:"projectID"`
}

// Project is a project ID and the directory Assign gave it to, identified
// by its inode: Clear takes the project off a directory only when the
// descriptor it is handed is that very directory. The inode is known by
// its number and generation (FS_IOC_GETVERSION, which XFS and ext4 keep on
// disk: a reused inode number has another generation), so the identity
// survives a reboot that brings the disk back under another device
// number; Dev is what the device was, and identifies the directory only
// where the filesystem has no generations (Gen 0).
type Project struct {
	ID  uint32 `json:"id"`
	Dev uint64 `json:"dev"`           // st_dev of the directory at Assign
	Ino uint64 `json:"ino"`           // st_ino of the directory
	Gen uint32 `json:"gen,omitempty"` // its generation, 0 when unknown
}

// CheckSupport returns nil when project quotas can be used on the
// filesystem holding path, a trusted path (it is resolved like any path):
// xfs or ext4 with project quota accounting on. Otherwise it returns an
// *UnsupportedError saying why (it matches ErrUnsupported), or another
// error when the question could not be asked (path missing, permission
// denied).
//
// Positive answers are cached per mount (by mount ID; a new mount is a new
// entry). A quota call that later finds accounting off drops the entry and
// reports ErrUnsupported, so a positive answer is never relied on after
// the kernel contradicted it. Negative answers are not cached.
func (m *Manager) CheckSupport(path string) error { return m.checkSupport(path) }

// Assign gives the directory open as dirFd a project of its own and
// returns the project, with the directory's identity. The project's hard
// block limit is limitBytes when the Manager enforces and limitBytes > 0,
// else none.
//
// Everything is done through dirFd: its project ID and inherit flag with
// the fsxattr ioctls on it, the limit with quotactl_fd on it (or quotactl
// on its filesystem's block device before Linux 5.14). path is what the
// bookkeeping files record for the directory and what messages call it;
// it is never opened, so a path whose components someone swaps for
// symlinks cannot redirect Assign to another directory. dirFd may be
// opened O_PATH; Assign does not close it.
//
// Assign is idempotent and restart-safe: a directory that already carries
// the ID the projects file records for path keeps it (adopted, its
// bookkeeping completed and its limit updated); a directory the projects
// file names but that carries no ID (a crash between the two writes) gets
// the recorded ID back. Any other ID on the directory — one recorded for
// another path, inherited, or recorded nowhere — is never adopted: the
// directory gets a new ID. New IDs are allocated from WithFirstID upward,
// skipping IDs in either file and IDs that have usage or limits; past half
// of the probes WithMaxProbes allows, at random from the rest of the range
// (a run of IDs made to look used cannot exhaust allocation). The
// bookkeeping is written before the directory is tagged, so a crash never
// leaves a tagged directory that the files do not name.
//
// It returns an *UnsupportedError (ErrUnsupported) when the filesystem
// cannot do project quotas; nothing is changed then.
func (m *Manager) Assign(dirFd int, path string, limitBytes int64) (Project, error) {
	return m.assign(dirFd, path, limitBytes)
}

// Clear releases the project of the directory Assign returned p for: the
// IDs the projects file records for path lose their limits and their
// bookkeeping entries, and the directory open as dirFd loses its project
// ID and inherit flag — but only when it is the directory p identifies
// and carries one of those IDs. Nothing else is ever cleared: not an ID
// the files record for another path or not at all (p.ID alone proves
// nothing; it may come from a record someone else could write), not a
// directory that replaced the assigned one, whose project stays as it is.
// A p without an identity (Ino 0, a record made before Project had one)
// accepts the directory dirFd is, which the caller reached without
// following symlinks.
//
// dirFd must be on the filesystem the project was assigned on: limits
// are cleared there. path is never opened, as for Assign. Clearing twice
// is not an error.
//
// Files still inside the directory keep charging the ID until they are
// removed; allocation skips IDs with usage, so the ID is not handed out
// again before that.
func (m *Manager) Clear(dirFd int, path string, p Project) error { return m.clear(dirFd, path, &p) }

// Release is Clear for a directory that is gone, or that the caller can
// no longer reach: the IDs the projects file records for path lose their
// limits and their bookkeeping entries, and no project ID is taken off
// anything. fsFd is any directory on the filesystem the project was
// assigned on (the volume directory's parent, say), where the limits are
// cleared; with fsFd -1 only the bookkeeping is undone, and the limits
// stay (allocation skips IDs with limits, so such an ID is not handed out
// again with a stale one).
func (m *Manager) Release(fsFd int, path string) error { return m.clear(fsFd, path, nil) }

// Usage returns the bytes and inodes charged to the project of the
// directory open as dirFd, the project's limit and its ID (the interface
// emptydir consumes); path is for messages. It returns ErrNoProject when
// the directory carries no ID, and an *UnsupportedError when the
// filesystem cannot report quotas (callers then walk the tree). (Usage and
// CheckSupport are the whole query set: the kubelet's GetConsumption,
// GetInodes and SupportsQuotas are Usage's fields and
// errors.Is(CheckSupport(path), ErrUnsupported).)
func (m *Manager) Usage(dirFd int, path string) (Usage, error) { return m.usage(dirFd, path) }

// QuotactlFD reports whether the running kernel has quotactl_fd (Linux
// 5.14), through which limits and usage are set and read on the
// directory's own descriptor; without it they go through quotactl on the
// filesystem's block device, found in the mount table. It is found by
// calling it on an invalid descriptor (EBADF, not ENOSYS), once per
// process. False on other operating systems.
func QuotactlFD() bool { return haveQuotactlFD() }

// ProjectID returns the project ID the file at path carries, 0 when none.
// It needs only the fsxattr ioctl, not quota support. path is resolved
// like any path (a final symlink is not followed): for tools and tests,
// not for paths below a directory others can write.
func ProjectID(path string) (uint32, error) { return projectID(path) }

// SetProjectID tags the directory (or file) at path with id; directories
// also get the inherit flag (id 0 clears it), so everything created below
// them carries id. It touches no bookkeeping and no limits: Manager.Assign
// is the safe way to give a directory a project. path is resolved like
// ProjectID's. Exposed for tools and tests.
func SetProjectID(path string, id uint32) error { return setProjectID(path, id) }
