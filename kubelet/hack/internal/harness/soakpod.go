package harness

import (
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The soak's pods, as its schedule describes them: created through the
// API in soakNamespace, placed by the scheduler on the planned node (a
// nodeSelector on its hostname), a busybox container writing into every
// writable volume and reading the others, then sleeping until deleted.

// soakNamespace holds the soak's pods, its Secret and its ConfigMap.
const soakNamespace = "nodevol-soak"

// The objects the secret, configMap and projected volumes show.
const (
	soakSecret    = "soak-secret"
	soakConfigMap = "soak-config"
)

// hugePageResource is the resource a HugePages volume's pod asks for.
const hugePageResource = corev1.ResourceName("hugepages-2Mi")

// soakPod is the pod of the plan, for nodevol-csi's driver name driver.
func soakPod(p podPlan, driver string) *corev1.Pod {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	var script []string
	var limits corev1.ResourceList
	for _, t := range p.Volumes {
		name := volumeName[t]
		v := corev1.Volume{Name: name}
		writable := true
		switch t {
		case volEmptyDir:
			v.EmptyDir = &corev1.EmptyDirVolumeSource{}
		case volEmptyDirLimit:
			v.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: ptrTo(resource.MustParse("64Mi"))}
		case volMemory:
			v.EmptyDir = &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptrTo(resource.MustParse("16Mi"))}
		case volHugePages:
			v.EmptyDir = &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}
			limits = corev1.ResourceList{hugePageResource: resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("32Mi")}
		case volSecret:
			v.Secret = &corev1.SecretVolumeSource{SecretName: soakSecret}
			writable = false
		case volConfigMap:
			v.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: soakConfigMap}}
			writable = false
		case volProjected:
			v.Projected = &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptrTo(int64(3600))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: soakConfigMap}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
			}}
			writable = false
		case volDownwardAPI:
			v.DownwardAPI = &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			}}
			writable = false
		case volCSIDefault:
			v.CSI = &corev1.CSIVolumeSource{Driver: driver, VolumeAttributes: map[string]string{"medium": "Default", "sizeLimit": "64Mi"}}
		case volCSIMemory:
			v.CSI = &corev1.CSIVolumeSource{Driver: driver, VolumeAttributes: map[string]string{"medium": "Memory", "sizeLimit": "16Mi"}}
		default:
			panic(fmt.Sprintf("soakPod: volume type %q", t))
		}
		vols = append(vols, v)
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: "/v/" + name, ReadOnly: !writable})
		if writable {
			script = append(script, "echo "+fromPodText+" > /v/"+name+"/from-pod")
		} else {
			script = append(script, "cat /v/"+name+"/* > /dev/null")
		}
	}
	if p.SubPath {
		mounts = append(mounts, corev1.VolumeMount{Name: volumeName[volEmptyDir], MountPath: "/sub", SubPath: "sub"})
		script = append(script, "echo "+fromPodText+" > /sub/from-pod")
	}
	// Failures of the commands above do not matter to the soak (it
	// checks volumes, not the container): the container must keep
	// running until its pod is deleted.
	script = append(script, "exec sleep 100000")
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: p.name(), Namespace: soakNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": "nodevol-soak", "nodevol-soak/index": fmt.Sprint(p.Index)}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: clusterNodeName(p.Node)},
			ServiceAccountName:            "default",
			AutomountServiceAccountToken:  ptrTo(false),
			EnableServiceLinks:            ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: suiteBusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", strings.Join(script, "; ")},
				VolumeMounts: mounts,
			}},
			Volumes: vols,
		},
	}
	if limits != nil {
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: limits, Requests: limits}
	}
	return pod
}

func ptrTo[T any](v T) *T { return &v }

// pluginDir is the directory of the type's volumes under a pod's
// volumes/ (the kubelet's escaped plugin name).
func pluginDir(t volumeType) string {
	switch t {
	case volEmptyDir, volEmptyDirLimit, volMemory, volHugePages:
		return emptyDirDir
	case volSecret:
		return "kubernetes.io~secret"
	case volConfigMap:
		return "kubernetes.io~configmap"
	case volProjected:
		return "kubernetes.io~projected"
	case volDownwardAPI:
		return "kubernetes.io~downward-api"
	case volCSIDefault, volCSIMemory:
		return "kubernetes.io~csi"
	}
	return ""
}

// nasDir is where a NAS is mounted inside a pod's volume of the type, in
// the node: in the directory the pod sees (a CSI volume's target, mount/).
func nasDir(uid string, t volumeType) string {
	dir := filepath.Join(kubeletRootInNode, "pods", uid, "volumes", pluginDir(t), volumeName[t])
	if csiVolume(t) {
		dir = filepath.Join(dir, "mount")
	}
	return filepath.Join(dir, "nas")
}
