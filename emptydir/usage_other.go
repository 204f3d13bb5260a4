//go:build !linux

package emptydir

import (
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

func (p *Plugin) usage(volRef) (Usage, error) { return Usage{}, mountdetect.ErrUnsupported }

func (p *Plugin) constructMedium(podUID, vol string) (volume.Medium, int64, int64, *uint32, bool, error) {
	return 0, 0, 0, nil, false, mountdetect.ErrUnsupported
}
