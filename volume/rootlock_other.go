//go:build !linux

package volume

import (
	"errors"
	"fmt"
)

func lockRoot(root, owner string, _ LockOptions) (*RootLock, error) {
	return nil, fmt.Errorf("lock kubelet root %s for %s: %w", root, owner, errors.ErrUnsupported)
}
