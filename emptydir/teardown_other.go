//go:build !linux

package emptydir

import (
	"context"

	"github.com/nodevol/nodevol/mountdetect"
)

func (p *Plugin) planTearDown(r volRef, tab *mountdetect.MountTable) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}

func (p *Plugin) tearDown(ctx context.Context, r volRef) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}

func (pl *Planner) planTearDown(r volRef, tab *mountdetect.MountTable) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}

// podVolume holds nothing where volumes are not supported.
type podVolume struct{}

func (*podVolume) Close() {}
