//go:build !linux

package subpath

import (
	"context"

	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

type tree struct{}

func (c *Cleaner) open(podUID, plugin, vol string) (*tree, error) {
	return nil, mountdetect.ErrUnsupported
}

func (t *tree) close()                      {}
func (t *tree) check() error                { return mountdetect.ErrUnsupported }
func (t *tree) clean(context.Context) error { return mountdetect.ErrUnsupported }
func (t *tree) list() ([]Entry, error)      { return nil, mountdetect.ErrUnsupported }

func (t *tree) examineAll(*mountdetect.MountTable, *volume.EntryBudget) ([]Entry, error, error) {
	return nil, nil, mountdetect.ErrUnsupported
}
