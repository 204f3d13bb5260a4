//go:build !linux

package cli

import (
	"fmt"

	"github.com/nodevol/nodevol/mountdetect"
)

// detectAt is tab.Detect and, for a directory (kind), tab.NestedMounts of path.
func detectAt(tab *mountdetect.MountTable, path string, kind entryKind) (mountdetect.FSInfo, []mountdetect.Mount, error) {
	info, err := tab.Detect(path)
	if err != nil {
		return info, nil, fmt.Errorf("detect: %w", err)
	}
	if kind != kindDir {
		return info, nil, nil
	}
	nested, err := tab.NestedMounts(path)
	if err != nil {
		return info, nil, fmt.Errorf("list nested mounts: %w", err)
	}
	return info, nested, nil
}
