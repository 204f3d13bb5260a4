package fsquota

import (
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeQuota stands in for quotactl on kernels without quotas: the fsxattr
// ioctls stay real, limits and usage live in a map.
type fakeQuota struct {
	mu         sync.Mutex
	off        bool             // accounting off
	stateCalls int              // how often state was asked
	getErr     error            // returned by get when set
	usedFrom   uint32           // every ID from this one up has usage (0: none)
	gets       int              // how often get was asked
	usage      map[uint32]dquot // usage and limits per ID
	limits     map[uint32]int64 // hard limits set through setLimit
}

func newFake() *fakeQuota {
	return &fakeQuota{usage: map[uint32]dquot{}, limits: map[uint32]int64{}}
}

func (f *fakeQuota) state(*fsRef) (quotaState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stateCalls++
	return quotaState{accounting: !f.off, enforcing: !f.off}, nil
}

func (f *fakeQuota) get(_ *fsRef, id uint32) (dquot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	if f.getErr != nil {
		return dquot{}, f.getErr
	}
	d := f.usage[id]
	if f.usedFrom != 0 && id >= f.usedFrom {
		d.inodes++
	}
	d.hardBytes = f.limits[id]
	return d, nil
}

func (f *fakeQuota) setLimit(_ *fsRef, id uint32, hard int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off {
		return unix.ESRCH
	}
	f.limits[id] = hard
	return nil
}

// fakeManager returns a Manager on the fake backend with its bookkeeping
// files in a temporary directory.
func fakeManager(t testing.TB, fake *fakeQuota, opts ...Option) (*byPath, bookkeeping) {
	t.Helper()
	bk := newBookkeeping(t)
	m := New(append([]Option{WithProjectsFile(bk.projects), WithProjidFile(bk.projid)}, opts...)...)
	m.backend = fake
	return paths(m), bk
}
