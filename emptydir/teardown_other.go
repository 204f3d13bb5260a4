//go:build !linux

package emptydir

import (
	"context"

	"github.com/nodevol/nodevol/mountdetect"
)

func (p *Plugin) planTearDown(podUID, vol string, tab *mountdetect.MountTable) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}

func (p *Plugin) tearDown(ctx context.Context, podUID, vol string) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}
