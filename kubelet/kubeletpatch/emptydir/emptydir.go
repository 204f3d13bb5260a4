package emptydir

import (
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/volume"

	"github.com/nodevol/nodevol/kubelet/volumeplugin"
)

// EmptyDirPluginName is the name the kubelet knows the emptyDir plugin by,
// as upstream's constant of the same name.
const EmptyDirPluginName = volumeplugin.PluginName

// ProbeVolumePlugins returns nodevol's emptyDir plugin, where upstream's
// returns its own. The kubelet calls it once, while it builds its list of
// volume plugins at startup; the log line it writes then is how a node's log
// tells that its emptyDir volumes are nodevol's.
func ProbeVolumePlugins() []volume.VolumePlugin {
	klog.InfoS("emptyDir volumes are served by nodevol", "pluginName", EmptyDirPluginName, "plugin", "github.com/nodevol/nodevol/kubelet/volumeplugin")
	// A node switched in place from a stock kubelet keeps its running
	// pods' tmpfs volumes: they are adopted, each one logged and counted
	// on the kubelet's /metrics.
	return volumeplugin.ProbeVolumePlugins(volumeplugin.WithAdoption(legacyregistry.Registerer()))
}
