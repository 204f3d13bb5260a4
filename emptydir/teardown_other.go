//go:build !linux

package emptydir

import (
	"context"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func (p *Plugin) planTearDown(r volRef, tab *mountdetect.MountTable) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}

func (p *Plugin) tearDown(ctx context.Context, r volRef) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}

func (pl *Planner) planTearDown(volRef, *mountdetect.MountTable, *volume.EntryBudget) (Plan, error) {
	return Plan{}, mountdetect.ErrUnsupported
}

func (pl *Planner) planListed(pd volume.PluginDir, _, _ string, _ *mountdetect.MountTable, fn func(int, Plan, error)) {
	for i := range pd.Volumes {
		fn(i, Plan{}, mountdetect.ErrUnsupported)
	}
}

// podVolume holds nothing where volumes are not supported.
type podVolume struct{}

func (*podVolume) Close() {}
