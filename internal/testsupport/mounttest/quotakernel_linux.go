package mounttest

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/nodevol/nodevol/internal/base/fsat"
)

// FileQuotaKernel is the quota kernel's stand-in for crash tests on a
// kernel without quotas (friend.QuotaKernel): project limits in a JSON
// file at Path, replaced atomically, so that they outlive a killed process
// as the kernel's would.
type FileQuotaKernel struct {
	Path string
	mu   sync.Mutex // one Manager's concurrent calls; processes never overlap
}

// Limits returns every project's limit.
func (k *FileQuotaKernel) Limits() (map[uint32]int64, error) {
	limits := map[uint32]int64{}
	b, err := os.ReadFile(k.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return limits, nil
	}
	if err != nil {
		return nil, err
	}
	return limits, json.Unmarshal(b, &limits)
}

// Limit returns project id's hard block limit (0: none).
func (k *FileQuotaKernel) Limit(id uint32) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	limits, err := k.Limits()
	return limits[id], err
}

// SetLimit sets project id's hard block limit (0: none).
func (k *FileQuotaKernel) SetLimit(id uint32, hard int64) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	limits, err := k.Limits()
	if err != nil {
		return err
	}
	if hard == 0 {
		delete(limits, id)
	} else {
		limits[id] = hard
	}
	b, err := json.Marshal(limits)
	if err != nil {
		return err
	}
	d, err := fsat.OpenRoot(filepath.Dir(k.Path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteFileAtomic(filepath.Base(k.Path), b, 0o644)
}
