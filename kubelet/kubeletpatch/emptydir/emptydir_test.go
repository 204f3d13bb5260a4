package emptydir_test

import (
	"testing"

	"github.com/nodevol/nodevol/kubelet/kubeletpatch/emptydir"
	"github.com/nodevol/nodevol/kubelet/volumeplugin"
)

// TestProbeVolumePlugins checks that the kubelet's one call hands out
// nodevol's plugin under upstream's name. (Importing the package also makes
// go test's cache of TestUpstreamExports depend on this package's source.)
func TestProbeVolumePlugins(t *testing.T) {
	plugins := emptydir.ProbeVolumePlugins()
	if len(plugins) != 1 {
		t.Fatalf("ProbeVolumePlugins() returned %d plugins; want 1", len(plugins))
	}
	if _, ok := plugins[0].(*volumeplugin.Plugin); !ok {
		t.Errorf("ProbeVolumePlugins()[0] is a %T; want *volumeplugin.Plugin", plugins[0])
	}
	if got := plugins[0].GetPluginName(); got != emptydir.EmptyDirPluginName {
		t.Errorf("GetPluginName() = %q; want %q", got, emptydir.EmptyDirPluginName)
	}
}
