package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The CSI scenario runs deploy/csi as a cluster would: its CSIDriver,
// Namespace and ServiceAccount created through the API, and the pod its
// DaemonSet would put on the node created through the API too (there is
// no controller manager here: the harness is the DaemonSet controller).
// This file holds the pure part: reading the manifests and making the
// node's pod from the DaemonSet's template.

// ErrUnfitCSIManifests is matched by the errors for manifests the CSI
// scenario cannot run: an object missing or twice, or a pod template that
// does not mount the kubelet root with Bidirectional propagation.
var ErrUnfitCSIManifests = errors.New("deploy/csi cannot be run")

// manifestKubeletRoot is the kubelet root the manifests name (hostPaths,
// mount paths, --kubelet-root): a node's default --root-dir.
const manifestKubeletRoot = "/var/lib/kubelet"

// csiManifests are deploy/csi's objects, decoded strictly.
type csiManifests struct {
	Driver         *storagev1.CSIDriver   `json:"driver"`
	Namespace      *corev1.Namespace      `json:"namespace"`
	ServiceAccount *corev1.ServiceAccount `json:"serviceAccount"`
	DaemonSet      *appsv1.DaemonSet      `json:"daemonSet"`
	Src            string                 `json:"src"` // the directory they came from
}

// readCSIManifests reads the one CSIDriver, Namespace, ServiceAccount and
// DaemonSet of the manifests (*.yaml, *.yml) in dir. A field the API does
// not know is an error, as is any other kind.
func readCSIManifests(dir string) (*csiManifests, error) {
	m := &csiManifests{Src: dir}
	if err := eachManifest(dir, func(_ string, b []byte) error { return m.add(b) }); err != nil {
		return nil, err
	}
	var missing []string
	for kind, v := range map[string]bool{"CSIDriver": m.Driver != nil, "Namespace": m.Namespace != nil, "ServiceAccount": m.ServiceAccount != nil, "DaemonSet": m.DaemonSet != nil} {
		if !v {
			missing = append(missing, kind)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: no %s in %s", ErrUnfitCSIManifests, strings.Join(missing, ", "), dir)
	}
	return m, nil
}

// add decodes the documents of one manifest file.
func (m *csiManifests) add(b []byte) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		var into any
		var slot func()
		switch tm.APIVersion + " " + tm.Kind {
		case "storage.k8s.io/v1 CSIDriver":
			o := new(storagev1.CSIDriver)
			into, slot = o, func() { m.Driver = o }
			if m.Driver != nil {
				return fmt.Errorf("%w: a second CSIDriver", ErrUnfitCSIManifests)
			}
		case "v1 Namespace":
			o := new(corev1.Namespace)
			into, slot = o, func() { m.Namespace = o }
			if m.Namespace != nil {
				return fmt.Errorf("%w: a second Namespace", ErrUnfitCSIManifests)
			}
		case "v1 ServiceAccount":
			o := new(corev1.ServiceAccount)
			into, slot = o, func() { m.ServiceAccount = o }
			if m.ServiceAccount != nil {
				return fmt.Errorf("%w: a second ServiceAccount", ErrUnfitCSIManifests)
			}
		case "apps/v1 DaemonSet":
			o := new(appsv1.DaemonSet)
			into, slot = o, func() { m.DaemonSet = o }
			if m.DaemonSet != nil {
				return fmt.Errorf("%w: a second DaemonSet", ErrUnfitCSIManifests)
			}
		default:
			return fmt.Errorf("%w: document %d is a %s %s, which the scenario does not create", ErrUnfitCSIManifests, n, tm.APIVersion, tm.Kind)
		}
		strictErrs, err := kjson.UnmarshalStrict(j, into)
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		if len(strictErrs) > 0 {
			return fmt.Errorf("document %d: %w", n, errors.Join(strictErrs...))
		}
		slot()
	}
}

// csiDriverPod is the pod the DaemonSet would run on the harness's node,
// with what the harness needs changed, and why:
//
//   - nodeName is the node (the DaemonSet controller's job);
//   - hostNetwork: true — the harness has no CNI;
//   - every hostPath, mount path and flag value under /var/lib/kubelet
//     names the harness kubelet's root instead (its --root-dir);
//   - the image is the one imported into containerd, never pulled.
//
// Everything else — arguments, security context, probes, resources — is
// the DaemonSet's, and the API server admits it as it would the
// DaemonSet's pod (PodSecurity at the Namespace's level included). The
// template must mount the kubelet root with Bidirectional propagation
// (the tmpfs volumes the driver mounts must reach the kubelet and the
// pods); otherwise it is refused.
func csiDriverPod(ds *appsv1.DaemonSet, kubeletRoot string) (*corev1.Pod, error) {
	unfit := func(format string, a ...any) error {
		return fmt.Errorf("%w: DaemonSet %s/%s: %s", ErrUnfitCSIManifests, ds.Namespace, ds.Name, fmt.Sprintf(format, a...))
	}
	tmpl := ds.Spec.Template.DeepCopy()
	spec := &tmpl.Spec
	if len(spec.Containers) != 1 {
		return nil, unfit("%d containers; want one", len(spec.Containers))
	}
	rewrite := func(p string) string {
		if p == manifestKubeletRoot || strings.HasPrefix(p, manifestKubeletRoot+"/") {
			return kubeletRoot + strings.TrimPrefix(p, manifestKubeletRoot)
		}
		return p
	}
	rootVolume := ""
	for i := range spec.Volumes {
		if hp := spec.Volumes[i].HostPath; hp != nil {
			if hp.Path == manifestKubeletRoot {
				rootVolume = spec.Volumes[i].Name
			}
			hp.Path = rewrite(hp.Path)
		}
	}
	if rootVolume == "" {
		return nil, unfit("no hostPath volume of %s", manifestKubeletRoot)
	}
	c := &spec.Containers[0]
	bidirectional := false
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		if vm.Name == rootVolume {
			bidirectional = vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional
			if vm.MountPath != manifestKubeletRoot {
				return nil, unfit("the kubelet root is mounted at %s; want %s, the path the kubelet names target paths by", vm.MountPath, manifestKubeletRoot)
			}
		}
		vm.MountPath = rewrite(vm.MountPath)
	}
	if !bidirectional {
		return nil, unfit("the kubelet root is not mounted with mountPropagation Bidirectional: the tmpfs volumes the driver mounts would never reach the kubelet")
	}
	for i, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			c.Args[i] = k + "=" + rewrite(v)
		}
	}
	c.ImagePullPolicy = corev1.PullNever
	spec.NodeName = nodeName
	spec.HostNetwork = true
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + nodeName, Namespace: ds.Namespace, Labels: tmpl.Labels, Annotations: tmpl.Annotations},
		Spec:       *spec,
	}, nil
}
