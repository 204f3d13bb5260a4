// Package volume will hold the volume plugin API: validated names and
// their reversible escaping, the kubelet's on-disk layout
// (<root>/pods/<uid>/volumes/<escaped-plugin>/<volume>), Spec and Pod
// types, the small Plugin/Mounter/Unmounter interfaces and the plugin
// registry. It depends on nothing else in nodevol.
package volume
