// Package emptydir stands in for k8s.io/kubernetes/pkg/volume/emptydir when
// the kubelet is built by kubelet/hack/build.sh: its non-test files are
// compiled under upstream's import path (go build -overlay deletes
// upstream's files there and adds these), so the kubelet's own calls —
// emptydir.ProbeVolumePlugins() in cmd/kubelet/app/plugins.go and
// emptydir.EmptyDirPluginName in pkg/kubelet/volumemanager — reach
// nodevol's plugin, github.com/nodevol/nodevol/kubelet/volumeplugin, and no
// upstream file is edited.
//
// It therefore exports every identifier upstream's package exports, with
// the same kind and type; TestUpstreamExports compares the two packages as
// the compiler sees them, so a Kubernetes version that adds or changes one
// fails there rather than in the kubelet build.
//
// Everything here must also compile under upstream's import path: no
// import comment, no internal packages of nodevol, and nothing that imports
// k8s.io/kubernetes/pkg/volume/emptydir (it would import itself).
//
// A kubelet fork does not need this package: it can change the one line in
// cmd/kubelet/app/plugins.go to call volumeplugin.ProbeVolumePlugins()
// (see docs/kubelet.md).
package emptydir
