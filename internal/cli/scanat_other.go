//go:build !linux

package cli

import (
	"github.com/nodevol/nodevol/internal/base/fsat"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

// examinedDir is the Linux examinedDir; elsewhere every examination
// fails (volume.Layout.ScanVolumes does too).
type examinedDir struct {
	checkResult
}

func (e *examinedDir) close() {}

// pluginDirs is the Linux pluginDirs.
type pluginDirs struct {
	pods *fsat.Dir
	tab  *mountdetect.MountTable
}

func (p *pluginDirs) close() {}

func (p *pluginDirs) listed(volume.PluginDir) {}

func examinePluginVolume(_ *pluginDirs, _ *mountdetect.MountTable, vd volume.VolumeDir) examinedDir {
	e := examinedDir{}
	e.Path, e.NestedMounts = vd.Path, []mountdetect.Mount{}
	e.fail(fsat.ErrUnsupported)
	return e
}

func (e *examinedDir) child(_ *mountdetect.MountTable, _, path string) checkResult {
	r := checkResult{Path: path, NestedMounts: []mountdetect.Mount{}}
	return r.fail(fsat.ErrUnsupported)
}

func hasEntry(*fsat.Dir, string, string) bool { return true }
