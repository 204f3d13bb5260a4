//go:build !linux

package emptydir

import (
	"context"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// SetUp is not supported on this platform.
func (m *mounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	return m.setUpErr(volume.Final, mountdetect.ErrUnsupported)
}
