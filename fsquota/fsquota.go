package fsquota

import (
	"fmt"
	"sync"

	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/internal/testhook"
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
	log          klog.Logger
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
func WithLogger(l klog.Logger) Option { return optionFunc(func(m *Manager) { m.log = l }) }

// WithFirstID sets the first ID allocation tries, FirstProjectID by
// default.
func WithFirstID(id uint32) Option { return optionFunc(func(m *Manager) { m.firstID = id }) }

// WithMaxProbes bounds the candidate IDs one allocation checks for usage,
// DefaultMaxProbes by default. IDs recorded in the bookkeeping files are
// skipped without counting.
func WithMaxProbes(n int) Option { return optionFunc(func(m *Manager) { m.maxProbes = n }) }

// WithTestHook makes Assign and Clear call h at their crash points
// (testhook.QuotaRecorded, QuotaLimited, QuotaUntagged), for nodevol's crash
// tests. Its parameter's type is internal to this module: elsewhere only
// nil can be passed, which changes nothing.
func WithTestHook(h testhook.Hook) Option { return optionFunc(func(m *Manager) { m.hook = h }) }

// WithTestKernel makes the Manager keep project limits in k instead of
// asking quotactl, with the fsxattr ioctls that tag directories still
// real: tests of code above fsquota (emptydir's crash tests) can then
// assign and clear projects on a kernel without quotas. Its parameter's
// type is internal to this module: elsewhere only nil can be passed, which
// changes nothing.
func WithTestKernel(k testhook.QuotaKernel) Option {
	return optionFunc(func(m *Manager) {
		if k != nil {
			m.backend = testKernel(k)
		}
	})
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
}

// CheckSupport returns nil when project quotas can be used on the
// filesystem holding path: xfs or ext4 with project quota accounting on.
// Otherwise it returns an *UnsupportedError saying why (it matches
// ErrUnsupported), or another error when the question could not be asked
// (path missing, permission denied).
//
// Positive answers are cached per mount (by mount ID; a new mount is a new
// entry). A quota call that later finds accounting off drops the entry and
// reports ErrUnsupported, so a positive answer is never relied on after
// the kernel contradicted it. Negative answers are not cached.
func (m *Manager) CheckSupport(path string) error { return m.checkSupport(path) }

// Assign gives the directory at path a project of its own and returns the
// project ID. The project's hard block limit is limitBytes when the
// Manager enforces and limitBytes > 0, else none.
//
// Assign is idempotent and restart-safe: a directory that already carries
// an ID recorded for it (or an ID recorded nowhere and not inherited from
// its parent) keeps that ID — it is adopted, its bookkeeping completed and
// its limit updated; a directory recorded in the projects file but without
// an ID (a crash between the two writes) gets the recorded ID back. New
// IDs are allocated from WithFirstID upward, skipping IDs in either file
// and IDs that have usage or limits. The bookkeeping is written before the
// directory is tagged, so a crash never leaves a tagged directory that the
// files do not name.
//
// It returns an *UnsupportedError (ErrUnsupported) when the filesystem
// cannot do project quotas; nothing is changed then.
func (m *Manager) Assign(path string, limitBytes int64) (projectID uint32, err error) {
	return m.assign(path, limitBytes)
}

// Clear removes the limit of the directory's project, takes the project ID
// off the directory and releases the ID from the bookkeeping files. It
// needs nothing but the path: what to undo is read from the directory and
// the files. A directory whose ID belongs to another recorded path (for
// example inherited from a parent) is left alone. A missing directory only
// has its bookkeeping entries removed. Clearing twice is not an error.
//
// Files still inside the directory keep charging the ID until they are
// removed; allocation skips IDs with usage, so the ID is not handed out
// again before that.
func (m *Manager) Clear(path string) error { return m.clear(path) }

// Usage returns the bytes and inodes charged to the directory's project
// (the interface emptydir consumes). It returns ErrNoProject when the
// directory carries no ID, and an *UnsupportedError when the filesystem
// cannot report quotas (callers then walk the tree).
func (m *Manager) Usage(path string) (bytes, inodes int64, err error) {
	u, err := m.usage(path)
	return u.Bytes, u.Inodes, err
}

// ProjectUsage is Usage with the project's limit. (Usage, CheckSupport
// and ProjectUsage are the whole query set: the kubelet's
// GetConsumption, GetInodes and SupportsQuotas are their fields and
// errors.Is(CheckSupport(path), ErrUnsupported).)
func (m *Manager) ProjectUsage(path string) (Usage, error) { return m.usage(path) }

// ProjectID returns the project ID the directory carries, 0 when none. It
// needs only the fsxattr ioctl, not quota support.
func ProjectID(path string) (uint32, error) { return projectID(path) }

// SetProjectID tags the directory (or file) at path with id; directories
// also get the inherit flag (id 0 clears it), so everything created below
// them carries id. It touches no bookkeeping and no limits: Manager.Assign
// is the safe way to give a directory a project. Exposed for tools and
// tests.
func SetProjectID(path string, id uint32) error { return setProjectID(path, id) }
