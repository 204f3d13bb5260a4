//go:build !linux

package mountdetect

import "fmt"

// PropagationOf is unsupported outside Linux: mount propagation is
// Linux's.
func PropagationOf(path string) (Propagation, error) {
	return Propagation{}, fmt.Errorf("propagation of %s: %w", path, ErrUnsupported)
}
