// Package volumeplugin is nodevol's emptyDir plugin as a kubelet volume
// plugin (k8s.io/kubernetes/pkg/volume.VolumePlugin).
package volumeplugin

import (
	_ "github.com/nodevol/nodevol/emptydir"
	_ "k8s.io/kubernetes/pkg/volume"
	_ "k8s.io/kubernetes/pkg/volume/emptydir"
	_ "k8s.io/kubernetes/pkg/volume/testing"
	_ "k8s.io/kubernetes/pkg/volume/util/nestedpendingoperations"
)
