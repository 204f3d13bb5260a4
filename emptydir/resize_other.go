//go:build !linux

package emptydir

import (
	"context"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func (p *Plugin) resizeVolume(ctx context.Context, podUID, vol string, sizeBytes int64) error {
	dir, _ := p.path(podUID, vol)
	return &volume.OperationError{Kind: volume.Final, Op: "Resize", Path: dir, Err: mountdetect.ErrUnsupported}
}
