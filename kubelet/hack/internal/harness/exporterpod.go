package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The exporter scenario runs the DaemonSet of deploy/ as a static pod.
// This file holds the pure part: reading the DaemonSet and turning its pod
// template into the static pod, checking on the way that the template
// keeps what the exporter's promise rests on.

// ErrUnfitDaemonSet is matched by the errors for a DaemonSet whose pod
// template cannot show that the exporter works: it would not see mounts
// made after it started, could write to the kubelet root, or lacks what
// the scenario needs to find it.
var ErrUnfitDaemonSet = errors.New("the DaemonSet cannot be run as the exporter")

// readDaemonSet reads the one DaemonSet of the manifests (*.yaml, *.yml)
// in dir, decoded strictly: a field the API does not know is an error,
// not silently dropped. Documents of other kinds are skipped.
func readDaemonSet(dir string) (*appsv1.DaemonSet, string, error) {
	var found *appsv1.DaemonSet
	var from string
	err := eachManifest(dir, func(path string, b []byte) error {
		dss, err := daemonSetsIn(b)
		if err != nil {
			return err
		}
		for _, ds := range dss {
			if found != nil {
				return fmt.Errorf("%w: two DaemonSets, %s/%s in %s and %s/%s in %s", ErrUnfitDaemonSet, found.Namespace, found.Name, from, ds.Namespace, ds.Name, path)
			}
			found, from = ds, path
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if found == nil {
		return nil, "", fmt.Errorf("%w: no DaemonSet in %s", ErrUnfitDaemonSet, dir)
	}
	return found, from, nil
}

// eachManifest calls fn with the path and contents of each manifest file
// (*.yaml, *.yml) directly in dir, in name order; fn's error is returned
// naming the file.
func eachManifest(dir string, fn func(path string, b []byte) error) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("the manifests directory: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() || (filepath.Ext(e.Name()) != ".yaml" && filepath.Ext(e.Name()) != ".yml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := fn(path, b); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// daemonSetsIn decodes the DaemonSets of a multi-document YAML file.
func daemonSetsIn(b []byte) ([]*appsv1.DaemonSet, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*appsv1.DaemonSet
	for n := 1; ; n++ {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if tm.Kind != "DaemonSet" {
			continue
		}
		if tm.APIVersion != appsv1.SchemeGroupVersion.String() {
			return nil, fmt.Errorf("document %d: DaemonSet of %s; want %s", n, tm.APIVersion, appsv1.SchemeGroupVersion)
		}
		ds, err := decodeStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d (DaemonSet): %w", n, err)
		}
		out = append(out, ds)
	}
}

// decodeStrict decodes a DaemonSet as the API server's strict field
// validation does: field names match case-sensitively (encoding/json
// would take readOnlyRootFileSystem for readOnlyRootFilesystem), and an
// unknown or duplicate field is an error.
func decodeStrict(doc []byte) (*appsv1.DaemonSet, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	ds := new(appsv1.DaemonSet)
	strictErrs, err := kjson.UnmarshalStrict(j, ds)
	if err != nil {
		return nil, err
	}
	if len(strictErrs) > 0 {
		return nil, errors.Join(strictErrs...)
	}
	return ds, nil
}

// staticExporterOptions say how the DaemonSet's pod becomes the harness's
// static pod.
type staticExporterOptions struct {
	uid         types.UID
	image       string // the image as containerd imported it
	kubeletRoot string // the harness kubelet's --root-dir
}

// staticExporter is the static pod, and what the scenario needs to talk
// to it, from its arguments and probes.
type staticExporter struct {
	pod        *corev1.Pod
	interval   time.Duration // --interval: detection must take no longer
	root       string        // --root: the kubelet root inside the container
	hostRoot   string        // --host-root, rewritten: the root label
	readyURL   string        // the readiness probe, on the loopback (hostNetwork)
	metricsURL string
}

// staticExporterPod turns the DaemonSet's pod template into a static pod
// for the harness's kubelet. What changes, and why:
//
//   - hostNetwork: true — the harness has no CNI; the probes and /metrics
//     are then on the node's loopback address;
//   - the kubelet root's hostPath and --host-root name the harness
//     kubelet's root directory (the mount path and --root, the container's
//     side, stay as they are);
//   - the image is the one imported into containerd, never pulled;
//   - no service account: NodeRestriction refuses mirror pods that name
//     one (the exporter uses no API);
//   - the pod gets the scenario's UID and the DaemonSet's name and
//     namespace.
//
// Everything else — arguments, security context, probes, resources,
// tolerations — is the DaemonSet's. The template must mount the kubelet
// root (the hostPath named by --host-root) at --root read-only with
// mountPropagation HostToContainer; otherwise it is refused.
func staticExporterPod(ds *appsv1.DaemonSet, o staticExporterOptions) (*staticExporter, error) {
	unfit := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s/%s: %s", ErrUnfitDaemonSet, ds.Namespace, ds.Name, fmt.Sprintf(format, args...))
	}
	spec := ds.Spec.Template.Spec.DeepCopy()
	if len(spec.Containers) != 1 {
		return nil, unfit("%d containers; want one, running nodevol serve", len(spec.Containers))
	}
	c := &spec.Containers[0]
	if len(c.Command) > 0 || len(c.Args) == 0 || c.Args[0] != "serve" {
		return nil, unfit("container %s runs %q %q; want the image's entrypoint with args \"serve\" ...", c.Name, c.Command, c.Args)
	}
	args := slices.Clone(c.Args)
	root, hasRoot, err := lookupFlag(args, "root")
	if err != nil {
		return nil, unfit("%v", err)
	}
	hostRoot, hasHostRoot, err := lookupFlag(args, "host-root")
	if err != nil {
		return nil, unfit("%v", err)
	}
	if !hasRoot || !hasHostRoot {
		return nil, unfit("serve needs --root (the kubelet root in the container) and --host-root (as the host names it); args %q", c.Args)
	}
	interval := 10 * time.Second // serve's default
	if f, ok, err := lookupFlag(args, "interval"); err != nil {
		return nil, unfit("%v", err)
	} else if ok {
		if interval, err = time.ParseDuration(f.value); err != nil || interval <= 0 {
			return nil, unfit("--interval %q: not a positive duration", f.value)
		}
	}
	listen := defaultServeListen
	if f, ok, err := lookupFlag(args, "listen"); err != nil {
		return nil, unfit("%v", err)
	} else if ok {
		listen = f.value
	}
	_, listenPort, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, unfit("--listen %q: %v", listen, err)
	}

	// The kubelet root: mounted at --root, read-only, receiving host mounts.
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if filepath.Clean(c.VolumeMounts[i].MountPath) == filepath.Clean(root.value) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return nil, unfit("no volume is mounted at --root %s", root.value)
	}
	if mount.MountPropagation == nil || *mount.MountPropagation != corev1.MountPropagationHostToContainer {
		return nil, unfit("the kubelet root at %s has mountPropagation %s; want HostToContainer, or mounts made after the pod started (a NAS in an emptyDir) are never seen", mount.MountPath, propagationString(mount.MountPropagation))
	}
	if !mount.ReadOnly {
		return nil, unfit("the kubelet root at %s is not mounted readOnly: the exporter only reads", mount.MountPath)
	}
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == mount.Name {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil || vol.HostPath == nil {
		return nil, unfit("volume %s mounted at --root is not a hostPath", mount.Name)
	}
	if filepath.Clean(vol.HostPath.Path) != filepath.Clean(hostRoot.value) {
		return nil, unfit("volume %s is hostPath %s but --host-root says %s: the metrics' root label would name another directory", vol.Name, vol.HostPath.Path, hostRoot.value)
	}
	vol.HostPath.Path = o.kubeletRoot
	hostRoot.set(args, "host-root", o.kubeletRoot)
	// A static pod has no ServiceAccount, and so no token to review
	// scrapers with: the static exporter serves /metrics plainly on
	// --listen (the node's loopback here), as a DaemonSet without
	// --secure-metrics-listen does. -mode deploy scrapes the secure one.
	for _, name := range []string{"secure-metrics-listen", "tls-cert-file", "tls-private-key-file", "kube-api-server", "kube-token-file", "kube-ca-file"} {
		f, ok, err := lookupFlag(args, name)
		if err != nil {
			return nil, unfit("%v", err)
		}
		if ok {
			f.set(args, name, "")
		}
	}
	c.Args = args

	probe := c.ReadinessProbe
	if probe == nil || probe.HTTPGet == nil {
		return nil, unfit("container %s has no HTTP readiness probe", c.Name)
	}
	port, err := probePort(c, probe.HTTPGet)
	if err != nil {
		return nil, unfit("%v", err)
	}

	c.Image = o.image
	c.ImagePullPolicy = corev1.PullNever
	spec.HostNetwork = true
	spec.ServiceAccountName = ""
	spec.DeprecatedServiceAccount = ""
	automount := false
	spec.AutomountServiceAccountToken = &automount
	spec.NodeName = ""

	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        ds.Name,
			Namespace:   ds.Namespace,
			UID:         o.uid,
			Labels:      ds.Spec.Template.Labels,
			Annotations: ds.Spec.Template.Annotations,
		},
		Spec: *spec,
	}
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	return &staticExporter{
		pod:        pod,
		interval:   interval,
		root:       root.value,
		hostRoot:   o.kubeletRoot,
		readyURL:   "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + probe.HTTPGet.Path,
		metricsURL: "http://" + net.JoinHostPort("127.0.0.1", listenPort) + "/metrics",
	}, nil
}

// setRootPropagation changes the propagation of the kubelet root's mount
// (the one at --root): scenario 8's control, which staticExporterPod
// itself would refuse.
func (ex *staticExporter) setRootPropagation(mode corev1.MountPropagationMode) error {
	c := &ex.pod.Spec.Containers[0]
	for i := range c.VolumeMounts {
		if filepath.Clean(c.VolumeMounts[i].MountPath) == filepath.Clean(ex.root) {
			c.VolumeMounts[i].MountPropagation = &mode
			return nil
		}
	}
	return fmt.Errorf("no volume is mounted at --root %s", ex.root)
}

// defaultServeListen is nodevol serve's default --listen.
const defaultServeListen = ":9477"

func propagationString(p *corev1.MountPropagationMode) string {
	if p == nil {
		return "unset (None)"
	}
	return string(*p)
}

// probePort resolves an HTTP probe's port, a number or the name of one of
// the container's ports.
func probePort(c *corev1.Container, g *corev1.HTTPGetAction) (int, error) {
	if g.Port.StrVal == "" {
		return g.Port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == g.Port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("the readiness probe's port %q is not one of container %s's ports", g.Port.StrVal, c.Name)
}

// argFlag is a flag found in a container's arguments.
type argFlag struct {
	at     int  // the index of the argument holding the value
	inline bool // "--name=value" rather than "--name value"
	value  string
}

// lookupFlag finds the flag name ("-name" or "--name", with "=value" or
// the value as the next argument) in args, up to a "--".
func lookupFlag(args []string, name string) (argFlag, bool, error) {
	var f argFlag
	found := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		n, v, inline := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if n != name {
			continue
		}
		if found {
			return f, false, fmt.Errorf("--%s is given twice", name)
		}
		found = true
		if inline {
			f = argFlag{at: i, inline: true, value: v}
			continue
		}
		if i+1 >= len(args) {
			return f, false, fmt.Errorf("--%s has no value", name)
		}
		i++
		f = argFlag{at: i, value: args[i]}
	}
	return f, found, nil
}

// set replaces the flag's value in args.
func (f argFlag) set(args []string, name, value string) {
	if f.inline {
		args[f.at] = "--" + name + "=" + value
	} else {
		args[f.at] = value
	}
}
