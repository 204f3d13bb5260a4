package reconciler

import (
	"errors"
	"fmt"
	"os"

	"github.com/nodevol/nodevol/internal/executor"
	"github.com/nodevol/nodevol/volume"
)

// reconstruct puts every volume directory found on disk into the actual
// state as uncertain: once sources are ready, volumes no pod wants are torn
// down through the same safe path as any other, and wanted ones are
// verified by SetUp. Unknown plugins and entries that do not parse are
// recorded as problems and left alone; pod directories without volumes are
// queued for cleanup.
func (m *Manager) reconstruct() {
	res, err := m.layout.ScanVolumes()
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		m.logger.Error(err, "Cannot scan pods directory for reconstruction", "root", m.layout.Root())
		m.addProblem(volume.ScanProblem{Path: m.layout.PodsDir(), Err: err})
		return
	}
	for _, p := range res.Problems {
		m.addProblem(p)
	}
	for _, vd := range res.Volumes {
		plugin, err := m.registry.FindByName(vd.Plugin)
		if err != nil {
			m.addProblem(volume.ScanProblem{Path: vd.Path, Err: err})
			continue
		}
		sc, ok := plugin.(volume.SpecConstructor)
		if !ok {
			m.addProblem(volume.ScanProblem{Path: vd.Path, Err: fmt.Errorf("plugin %s cannot reconstruct volumes", vd.Plugin)})
			continue
		}
		spec, err := sc.ConstructSpec(vd.Volume, vd.Path)
		if err != nil {
			m.addProblem(volume.ScanProblem{Path: vd.Path, Err: fmt.Errorf("reconstruct: %w", err)})
			continue
		}
		mv := executor.MountedVolume{VolumeName: uniqueName(plugin, vd.PodUID, vd.Volume), PodUID: vd.PodUID, InnerName: vd.Volume, Plugin: plugin, Spec: spec}
		_ = m.asw.MarkUncertain(mv, errReconstructed)
		m.logger.V(2).Info("Reconstructed volume", "pod", vd.PodUID, "volume", vd.Volume, "plugin", vd.Plugin)
	}
	for _, dir := range res.Leftovers {
		vp := filepathBase(dir)
		m.markDirty(vp)
	}
}

func (m *Manager) addProblem(p volume.ScanProblem) {
	m.logger.Info("Left alone during reconstruction", "path", p.Path, "err", p.Err)
	m.mu.Lock()
	m.problems = append(m.problems, p)
	m.mu.Unlock()
}

func filepathBase(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
