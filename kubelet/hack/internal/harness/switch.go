package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/nodevol/nodevol/fsquota"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The switch scenarios replace the node's kubelet binary in place, as an
// operator who rolls a kubelet out (or back) does: stop the service, put
// the other binary there, start it with the same configuration and root
// directory. The node is not drained: the pods' containers are
// containerd's and keep running across the switch, and the new kubelet
// finds their volumes mounted by the other one.

const (
	switchConfigKey = "greeting"
	switchSecretKey = "password"
	// switchSyncLimit is how long a change may take to reach a running
	// pod's volume: three of the kubelet's sync periods (syncFrequency 10s;
	// a pod is resynced 10–15 s after its last sync).
	switchSyncLimit = 30 * time.Second
	// switchTeardownLimit is how long the pods' directories may take to
	// go after the pods are deleted (a refusal retried with backoff never
	// lets them go).
	switchTeardownLimit = 60 * time.Second
	// saTokenPath is where the admission's kube-api-access volume puts the
	// token in the container.
	saTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

func expectSwitch(to flavor) func(flavor) string {
	return func(flavor) string {
		if to == nodevolKubelet {
			return "pods keep running, no restart; every volume set up again on the stock kubelet's tmpfs (same mount), each tmpfs adopted (one log line each); configMap change seen in the container; tokens refreshed; NAS refused (≥2 tries, backoff), sentinel intact, gone after umount; everything torn down; nothing left"
		}
		return "pods keep running, no restart; every volume set up again on nodevol's tmpfs (same mount); configMap change seen in the container; tokens refreshed; everything torn down: no mount, directory, nodevol file (but the session log), immutable flag or quota project left"
	}
}

// runSwitch runs a scenario that switches the node's kubelet, on a node of
// its own (containerd, a kubelet root, a cgroup), starting with the
// switch's first kubelet. Its row is nodevol's result either way: taking
// a node over, or leaving one that the stock kubelet can clean.
func runSwitch(ctx context.Context, cfg innerConfig, cp *controlPlane, s scenario, log *logger) (row, error) {
	sw := *s.switches
	n, err := startNode(ctx, cfg, cp, filepath.Join(cfg.Workdir, s.id()), s.id(), sw.from, log)
	if err != nil {
		return row{Scenario: s.id(), Kubelet: sw.String(), Expected: s.expect(sw.to)}, err
	}
	defer n.stop()
	var o outcome
	t := time.Now()
	slog := log.with(s.id() + ": ")
	if sdir, err := scenarioDir(cfg.Workdir, sw.from, s); err != nil {
		o.harness(err)
	} else {
		env := &scenarioEnv{flavor: sw.from, kubelet: n.kubelet, api: cp, dir: sdir, podName: fmt.Sprintf("s%d", s.num), kubeletBins: cfg.Kubelets, log: slog}
		s.run(ctx, env, &o)
	}
	o.time("scenario", time.Since(t))
	r := makeRow(s, sw.to, &o)
	r.Kubelet, r.Peer = sw.String(), false
	slog.Printf("%s: %s", verdict(r), r.Observed)
	for _, fl := range r.Failures {
		slog.Printf("  ✗ %s", fl)
	}
	return r, nil
}

// switchRun is one switch scenario's state.
type switchRun struct {
	sw   kubeletSwitch
	env  *scenarioEnv
	o    *outcome
	k    *kubelet
	api  *controlPlane
	app  *switchPod // every kind of volume
	nas  *switchPod // a Default emptyDir, with a NAS inside it when switching to nodevol
	pods []*switchPod
	// configMap and secret are the objects app's volumes show.
	configMap, secret string
}

// switchPod is one of the scenario's pods, created through the API.
type switchPod struct {
	pod         *corev1.Pod // as created: its UID, the admission's kube-api-access volume
	vols        []podVolume
	containerID string
	pid         int                        // the container's first process
	mounts      map[string]*mountinfo.Info // tmpfs volume → its mount before the switch
	tokens      map[string]string          // token file in the container → content before the switch
}

// podVolume is one of a pod's volumes where the kubelet lays it out.
type podVolume struct {
	name   string
	key    string // "configmap/config": the kubelet's unique volume name is kubernetes.io/<key with the pod UID>
	dir    string // pods/<uid>/volumes/kubernetes.io~<plugin>/<name>
	meta   string // the emptyDir plugin's directory for it (ready marker; nodevol.json)
	tmpfs  bool   // a tmpfs the emptyDir plugin mounts: Memory, or a secret's, downwardAPI's or projected volume's
	memory bool   // a Memory emptyDir
}

// volumesOf lists the pod's volumes that the emptyDir plugin serves,
// itself or wrapped (secret, configMap, projected, downwardAPI).
func volumesOf(k *kubelet, pod *corev1.Pod) []podVolume {
	var out []podVolume
	for _, v := range pod.Spec.Volumes {
		var plugin string
		pv := podVolume{name: v.Name, tmpfs: true}
		switch {
		case v.EmptyDir != nil:
			plugin = emptyDirDir
			pv.memory = v.EmptyDir.Medium == corev1.StorageMediumMemory
			pv.tmpfs = pv.memory
		case v.Secret != nil:
			plugin = "kubernetes.io~secret"
		case v.ConfigMap != nil:
			// The configMap plugin wraps a Default emptyDir: a directory
			// on the kubelet root's filesystem, not a tmpfs (upstream's
			// wrappedVolumeSpec, "until the tmpfs's memory can be charged
			// to the right cgroup").
			plugin = "kubernetes.io~configmap"
			pv.tmpfs = false
		case v.Projected != nil:
			plugin = "kubernetes.io~projected"
		case v.DownwardAPI != nil:
			plugin = "kubernetes.io~downward-api"
		default:
			continue
		}
		metaName := v.Name
		if plugin != emptyDirDir {
			metaName = "wrapped_" + v.Name // NewWrapperMounter's name for it
		}
		pv.key = strings.TrimPrefix(plugin, "kubernetes.io~") + "/" + v.Name
		pv.dir = k.volumeDir(pod, plugin, v.Name)
		pv.meta = filepath.Join(k.podDir(pod), "plugins", emptyDirDir, metaName)
		out = append(out, pv)
	}
	return out
}

// switchScenario starts pods with every kind of volume the emptyDir plugin
// serves under the switch's first kubelet, replaces the kubelet binary in
// place, checks that the pods keep running and their volumes keep being
// served (a configMap change and fresh tokens reach the running
// container), deletes the pods and checks that nothing is left. Switching
// to nodevol, a NAS mounted in a Default emptyDir before the switch must
// be refused at deletion and kept byte for byte.
func switchScenario(sw kubeletSwitch) func(context.Context, *scenarioEnv, *outcome) {
	return func(ctx context.Context, env *scenarioEnv, o *outcome) {
		r := &switchRun{sw: sw, env: env, o: o, k: env.kubelet, api: env.api,
			configMap: env.podName + "-config", secret: env.podName + "-secret"}
		defer r.deleteObjects()
		r.run(ctx)
	}
}

func (r *switchRun) run(ctx context.Context) {
	o, k := r.o, r.k
	quotaFilesBefore := quotaFiles()
	if !r.createObjects(ctx) || !r.startPods(ctx) {
		return
	}
	if !r.checkVolumes() {
		return
	}
	var nas *switchNAS
	if r.sw.to == nodevolKubelet {
		if nas = r.mountNAS(); nas == nil {
			return
		}
		defer nas.cleanup()
	}

	// The switch.
	bin := r.env.kubeletBins[r.sw.to.String()]
	t0 := time.Now()
	exited, err := k.replaceBinary(ctx, bin, "kubelet-"+r.sw.to.String()+".log")
	if err != nil {
		o.harness(fmt.Errorf("starting the %s kubelet in place: %w", r.sw.to, err))
		return
	}
	downtime := time.Since(t0)
	if err := checkKubeletKind(k, r.sw.to); err != nil {
		o.harness(err)
		return
	}
	o.time("SIGTERM → "+r.sw.from.String()+" kubelet exited", exited)
	o.time("switch downtime: SIGTERM → "+r.sw.to.String()+" kubelet healthy", downtime)
	o.fact("kubelet binary replaced in place: %s exited %.1fs after SIGTERM, %s (%s) healthy %.1fs after it", r.sw.from, exited.Seconds(), bin, r.sw.to, downtime.Seconds())
	for _, p := range r.pods {
		if !o.want(processAlive(p.pid), "%s's container (pid %d) did not survive the kubelet's stop", p.pod.Name, p.pid) {
			return
		}
	}
	o.observe("switched in %.1fs", downtime.Seconds())

	r.afterSwitch(ctx, t0)
	r.checkStillRunning(ctx)
	r.checkSameMounts()
	r.deleteAndTearDown(ctx, nas)
	r.checkNothingLeft(quotaFilesBefore)
}

// createObjects creates the ConfigMap and Secret app's volumes show, and
// kube-root-ca.crt, which kube-controller-manager would publish in every
// namespace and every kube-api-access volume projects (the harness has no
// controller manager).
func (r *switchRun) createObjects(ctx context.Context) bool {
	ca, err := os.ReadFile(r.api.pki.path(caCertFile))
	if err != nil {
		r.o.harness(err)
		return false
	}
	objects := []struct {
		path string
		v    any
	}{
		{"/api/v1/namespaces/default/configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "default"}, Data: map[string]string{"ca.crt": string(ca)}}},
		{"/api/v1/namespaces/default/configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: r.configMap, Namespace: "default"}, Data: map[string]string{switchConfigKey: "before the switch"}}},
		{"/api/v1/namespaces/default/secrets", &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: r.secret, Namespace: "default"}, StringData: map[string]string{switchSecretKey: "s3cr3t"}}},
	}
	for _, obj := range objects {
		if err := r.api.do(ctx, http.MethodPost, obj.path, obj.v, nil); err != nil && !errors.Is(err, ErrExists) {
			r.o.harness(err)
			return false
		}
	}
	return true
}

// deleteObjects deletes the ConfigMap and Secret (kube-root-ca.crt stays,
// as it would in a cluster).
func (r *switchRun) deleteObjects() {
	ctx := context.Background()
	_ = r.api.do(ctx, http.MethodDelete, "/api/v1/namespaces/default/configmaps/"+r.configMap, nil, nil)
	_ = r.api.do(ctx, http.MethodDelete, "/api/v1/namespaces/default/secrets/"+r.secret, nil, nil)
}

// switchAppPod has every kind of volume the emptyDir plugin serves: a
// Memory emptyDir with a sizeLimit, a Default one with a sizeLimit and a
// subPath of it, a secret, a configMap (and a subPath of one of its
// files), a downwardAPI volume and a projected volume with a
// serviceAccountToken, a configMap and a downwardAPI source; the
// ServiceAccount admission adds a kube-api-access-* projected volume.
func switchAppPod(name, configMap, secret string) *corev1.Pod {
	memLimit, scratchLimit := resource.MustParse(memorySizeLimit), resource.MustParse("64Mi")
	expiry := int64(600) // the API's minimum
	pod := busyboxPod(name, "", "echo "+fromPodText+" > /data/from-pod && echo "+fromPodText+" > /sub/from-pod && echo "+fromPodText+" > /mem/from-pod",
		[]corev1.VolumeMount{
			{Name: "mem", MountPath: "/mem"},
			{Name: scratchVolume, MountPath: "/data"},
			{Name: scratchVolume, MountPath: "/sub", SubPath: "sub"},
			{Name: "secret", MountPath: "/secret"},
			{Name: "config", MountPath: "/config"},
			{Name: "config", MountPath: "/config-file", SubPath: switchConfigKey},
			{Name: "podinfo", MountPath: "/podinfo"},
			{Name: "proj", MountPath: "/proj"},
		},
		[]corev1.Volume{
			{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &memLimit}}},
			{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &scratchLimit}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}},
			{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			}}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: tokenAudience, ExpirationSeconds: &expiry, Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: configMap},
					Items: []corev1.KeyToPath{{Key: switchConfigKey, Path: "config/" + switchConfigKey}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				}}},
			}}}},
		})
	pod.Spec.NodeName = nodeName
	pod.Spec.ServiceAccountName = "default"
	return pod
}

// switchNASPod has a Default emptyDir with a sizeLimit (and the
// admission's kube-api-access volume).
func switchNASPod(name string) *corev1.Pod {
	limit := resource.MustParse("64Mi")
	pod := busyboxPod(name, "", "echo "+fromPodText+" > /data/from-pod",
		[]corev1.VolumeMount{{Name: scratchVolume, MountPath: "/data"}},
		[]corev1.Volume{{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}})
	pod.Spec.NodeName = nodeName
	pod.Spec.ServiceAccountName = "default"
	return pod
}

// startPods creates the pods through the API and waits until they run
// and their containers wrote their files.
func (r *switchRun) startPods(ctx context.Context) bool {
	o, k := r.o, r.k
	t0 := time.Now()
	for _, pod := range []*corev1.Pod{switchAppPod(r.env.podName+"-app", r.configMap, r.secret), switchNASPod(r.env.podName + "-nas")} {
		created, err := r.api.createPod(ctx, pod)
		if err != nil {
			o.harness(fmt.Errorf("creating pod %s: %w", pod.Name, err))
			return false
		}
		r.pods = append(r.pods, &switchPod{pod: created, vols: volumesOf(k, created)})
	}
	r.app, r.nas = r.pods[0], r.pods[1]
	for _, p := range r.pods {
		if err := k.waitRunning(ctx, p.pod); err != nil {
			o.harness(fmt.Errorf("%w; the kubelet's last errors: %s", err, k.lastErrors()))
			return false
		}
		var status *corev1.Pod
		err := poll(ctx, 30*time.Second, func() (bool, error) {
			got, err := r.api.apiPod(ctx, p.pod.Namespace, p.pod.Name)
			if err != nil {
				return false, nil
			}
			status = got
			cs := got.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Running != nil && cs[0].ContainerID != "", nil
		})
		if err != nil {
			o.harness(fmt.Errorf("pod %s: no running container in its API status: %w", p.pod.Name, err))
			return false
		}
		p.containerID = status.Status.ContainerStatuses[0].ContainerID
		if p.pid, err = containerProcess(string(p.pod.UID), strings.TrimPrefix(p.containerID, "containerd://")); err != nil {
			o.harness(err)
			return false
		}
	}
	o.time("pods created → running ("+r.sw.from.String()+")", time.Since(t0))
	// The containers' own writes, seen from inside them.
	for _, f := range []string{"/data/from-pod", "/sub/from-pod", "/mem/from-pod"} {
		if err := poll(ctx, 10*time.Second, func() (bool, error) {
			got, _ := readInContainer(r.app.pid, f)
			return got == fromPodText+"\n", nil
		}); err != nil {
			o.harness(fmt.Errorf("the app container did not write %s: %w", f, err))
			return false
		}
	}
	return true
}

// checkVolumes checks, before the switch, what the first kubelet made:
// the files the container sees, each tmpfs (whose mount it records), and
// whose emptyDir plugin made it (nodevol's records and sources, or none).
func (r *switchRun) checkVolumes() bool {
	o := r.o
	app := r.app
	files := map[string]string{
		"/secret/" + switchSecretKey:      "s3cr3t",
		"/config/" + switchConfigKey:      "before the switch",
		"/config-file":                    "before the switch",
		"/proj/config/" + switchConfigKey: "before the switch",
		"/podinfo/name":                   app.pod.Name,
		"/proj/labels":                    fmt.Sprintf("app=%q", app.pod.Name),
		"/var/run/secrets/kubernetes.io/serviceaccount/namespace": "default",
	}
	right := 0
	for path, want := range files {
		got, _ := readInContainer(app.pid, path)
		if o.want(got == want, "in the app container, %s = %q; want %q", path, got, want) {
			right++
		}
	}
	ok := right == len(files)
	for _, p := range r.pods {
		p.mounts, p.tokens = map[string]*mountinfo.Info{}, map[string]string{}
		tokens := []string{saTokenPath}
		if p == r.app {
			tokens = append(tokens, "/proj/token")
		}
		for _, path := range tokens {
			jwt, _ := readInContainer(p.pid, path)
			c, err := parseTokenClaims(jwt)
			ok = o.want(err == nil && c.Kubernetes.Pod.UID == string(p.pod.UID), "%s: %s is not a token bound to the pod: %v", p.pod.Name, path, err) && ok
			p.tokens[path] = jwt
		}
		records := 0
		for _, v := range p.vols {
			if _, err := os.Lstat(filepath.Join(v.meta, "nodevol.json")); err == nil {
				records++
			}
			if !v.tmpfs {
				continue
			}
			m, err := mountAt(v.dir)
			if err != nil {
				o.harness(err)
				return false
			}
			if !o.want(m != nil && m.FSType == "tmpfs", "%s: %s is not a tmpfs before the switch: %+v", p.pod.Name, v.key, m) {
				ok = false
				continue
			}
			p.mounts[v.name] = m
			if r.sw.from == nodevolKubelet {
				ok = o.want(strings.HasPrefix(m.Source, nodevolTmpfsSource), "%s: %s's tmpfs has source %q, not nodevol's %s…", p.pod.Name, v.key, m.Source, nodevolTmpfsSource) && ok
			} else {
				ok = o.want(m.Source == "tmpfs", "%s: %s's tmpfs has source %q, not the stock kubelet's tmpfs", p.pod.Name, v.key, m.Source) && ok
			}
			if v.memory {
				ok = o.want(strings.Contains(","+m.VFSOptions+",", ","+memoryTmpfsSize+","), "%s: the Memory volume's options %q lack %s", p.pod.Name, m.VFSOptions, memoryTmpfsSize) && ok
			}
		}
		wantRecords := 0
		if r.sw.from == nodevolKubelet {
			wantRecords = len(p.vols)
		}
		ok = o.want(records == wantRecords, "%s: %d of its %d volumes have a nodevol.json; want %d", p.pod.Name, records, len(p.vols), wantRecords) && ok
		o.fact("%s (uid %s): volumes %s; %d tmpfs (sources %s); %d nodevol.json before the switch", p.pod.Name, p.pod.UID, volumeKeys(p.vols), len(p.mounts), mountSources(p.mounts), records)
	}
	if ok {
		o.observe("%d volumes in 2 pods set up by the %s kubelet", len(r.app.vols)+len(r.nas.vols), r.sw.from)
	}
	return ok
}

func volumeKeys(vols []podVolume) string {
	var keys []string
	for _, v := range vols {
		keys = append(keys, v.key)
	}
	return strings.Join(keys, ", ")
}

func mountSources(ms map[string]*mountinfo.Info) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Source)
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ", ")
}

// switchNAS is the NAS the host mounts in the nas pod's Default emptyDir.
type switchNAS struct {
	path     string
	vol      string
	sentinel []byte
	own      []byte // a file of the volume's own, written by the host
	mounted  bool
}

// mountNAS mounts a tmpfs "NAS" with a 64 KiB sentinel inside the nas
// pod's Default emptyDir, before the switch.
func (r *switchRun) mountNAS() *switchNAS {
	vol := r.k.volumeDir(r.nas.pod, emptyDirDir, scratchVolume)
	n := &switchNAS{path: filepath.Join(vol, "nas"), vol: vol, sentinel: make([]byte, sentinelSize), own: make([]byte, 4096)}
	_, _ = rand.Read(n.sentinel)
	_, _ = rand.Read(n.own)
	if err := os.WriteFile(filepath.Join(vol, "own-file"), n.own, 0o644); err != nil {
		r.o.harness(err)
		return nil
	}
	if err := mountNAS(nasTmpfs, n.path, "", n.sentinel); err != nil {
		r.o.harness(err)
		return nil
	}
	n.mounted = true
	r.o.fact("NAS (tmpfs e2e-nas) mounted at %s before the switch, sentinel %d bytes, sha256 %x", strings.TrimPrefix(n.path, r.k.root+"/"), len(n.sentinel), sha256.Sum256(n.sentinel))
	return n
}

func (n *switchNAS) cleanup() {
	if n.mounted {
		_ = unix.Unmount(n.path, unix.MNT_DETACH)
	}
}

// afterSwitch updates the ConfigMap and waits, for at most switchSyncLimit
// after that, until the change is in the running container (through the
// configMap volume and the projected one), every token it sees was
// replaced by the new kubelet's, and the new kubelet's log shows every
// volume set up again; then it checks each.
func (r *switchRun) afterSwitch(ctx context.Context, switched time.Time) {
	o, k := r.o, r.k
	const changed = "after the switch"
	if err := r.updateConfigMap(ctx, changed); err != nil {
		o.harness(err)
		return
	}
	t0 := time.Now()
	var configSeen, tokensSeen, setUpSeen time.Duration
	ops := map[*switchPod]*volumeOps{}
	for _, p := range r.pods {
		ops[p] = newVolumeOps(string(p.pod.UID))
	}
	_ = poll(ctx, switchSyncLimit, func() (bool, error) {
		now := time.Since(t0)
		if configSeen == 0 {
			a, _ := readInContainer(r.app.pid, "/config/"+switchConfigKey)
			b, _ := readInContainer(r.app.pid, "/proj/config/"+switchConfigKey)
			if a == changed && b == changed {
				configSeen = now
			}
		}
		if tokensSeen == 0 && r.tokensChanged() == r.tokenCount() {
			tokensSeen = time.Since(switched)
		}
		if setUpSeen == 0 {
			all := true
			for _, p := range r.pods {
				if err := ops[p].read(k); err != nil {
					return false, err
				}
				all = all && ops[p].allSetUp(p.vols)
			}
			if all {
				setUpSeen = time.Since(switched)
			}
		}
		return configSeen != 0 && tokensSeen != 0 && setUpSeen != 0, k.alive()
	})
	for _, p := range r.pods {
		_ = ops[p].read(k)
	}

	// Every volume set up again by the new kubelet, and none refused.
	total, good := 0, 0
	var refused []string // for want of a record
	example := ""
	for _, p := range r.pods {
		for _, v := range p.vols {
			total++
			res := ops[p].setUp[v.key]
			switch {
			case res.succeeded > 0 && res.failed == 0:
				good++
			case res.failed > 0 && isNoRecordRefusal(res.firstError):
				refused = append(refused, p.pod.Name+"/"+v.key)
				if example == "" {
					example = fmt.Sprintf("%s/%s (%d failed SetUps): %s", p.pod.Name, v.key, res.failed, strings.ReplaceAll(res.firstError, k.root, "$ROOT"))
				}
			case res.failed > 0:
				o.want(false, "%s: %s was not set up again by the %s kubelet: %d failed SetUps, the first: %s", p.pod.Name, v.key, r.sw.to, res.failed, strings.ReplaceAll(res.firstError, k.root, "$ROOT"))
			default:
				o.want(false, "%s: %s was not set up again by the %s kubelet: no SetUp of it in its log", p.pod.Name, v.key, r.sw.to)
			}
		}
	}
	o.observe("%d/%d volumes set up again", good, total)
	if r.sw.to == nodevolKubelet {
		r.checkAdoptions(k)
	}
	if setUpSeen != 0 {
		o.time("SIGTERM → every volume set up again (kubelet log)", setUpSeen)
	}
	if len(refused) > 0 {
		o.want(false, "%d volumes were not set up again by the %s kubelet: nodevol refuses the tmpfs the stock kubelet mounted on each, because it has no record of mounting it (\"no record\" refusal: the tmpfs is not adopted): %s; the first error of %s", len(refused), r.sw.to, strings.Join(refused, ", "), example)
		o.observe("%d refused: no record", len(refused))
	}

	// The configMap change, in the running container: in the configMap
	// volume (a Default emptyDir's directory) and in the projected volume
	// with a configMap source (a tmpfs).
	if configSeen != 0 {
		o.observe("configMap change seen in %.1fs", configSeen.Seconds())
		o.time("configMap updated → change seen in the container", configSeen)
	} else {
		a, _ := readInContainer(r.app.pid, "/config/"+switchConfigKey)
		b, _ := readInContainer(r.app.pid, "/proj/config/"+switchConfigKey)
		var why []string
		if a != changed {
			why = append(why, r.refusalOf(ops[r.app], "configmap/config"))
		}
		if b != changed {
			why = append(why, r.refusalOf(ops[r.app], "projected/proj"))
		}
		o.want(false, "the configMap change did not reach the running container within %v: it sees %q in the configMap volume and %q in the projected volume with a configMap source; %s", switchSyncLimit, a, b, strings.Join(why, "; "))
		o.observe("configMap change seen: configMap volume %s, projected volume %s", map[bool]string{true: "yes", false: "NO"}[a == changed], map[bool]string{true: "yes", false: "NO"}[b == changed])
	}
	// The first change reached the volumes with the new kubelet's first
	// SetUp of them. A second one, once the kubelet has settled, must come
	// with its periodic SetUp (a remount) of the volumes it now serves.
	if configSeen != 0 {
		const again = "changed again after the switch"
		if err := r.updateConfigMap(ctx, again); err != nil {
			o.harness(err)
			return
		}
		t1 := time.Now()
		err := poll(ctx, switchSyncLimit, func() (bool, error) {
			a, _ := readInContainer(r.app.pid, "/config/"+switchConfigKey)
			b, _ := readInContainer(r.app.pid, "/proj/config/"+switchConfigKey)
			return a == again && b == again, k.alive()
		})
		if o.want(err == nil, "a second configMap change, once the %s kubelet had set every volume up, did not reach the running container within %v: %v", r.sw.to, switchSyncLimit, err) {
			o.observe("again in %.1fs", time.Since(t1).Seconds())
			o.time("configMap updated again (kubelet settled) → change seen in the container", time.Since(t1))
		}
	} else {
		o.fact("no second configMap change was made: the first did not reach both volumes")
	}
	// A subPath of a configMap file is a bind of the file: it never sees a
	// change (Kubernetes documents it), on either kubelet.
	if got, _ := readInContainer(r.app.pid, "/config-file"); got != "before the switch" {
		o.fact("the configMap subPath file shows %q", got)
	}

	// The tokens: the new kubelet's token manager starts with an empty
	// cache, so its first SetUp of each projected volume writes a new token.
	n := r.tokensChanged()
	if tokensSeen != 0 {
		o.observe("%d/%d tokens refreshed", n, r.tokenCount())
		o.time("SIGTERM → every token in the containers replaced", tokensSeen)
	} else {
		var why []string
		for _, p := range r.pods {
			for _, v := range p.vols {
				if strings.HasPrefix(v.key, "projected/") {
					why = append(why, p.pod.Name+": "+r.refusalOf(ops[p], v.key))
				}
			}
		}
		o.want(false, "%d of the %d tokens the containers see were replaced by the %s kubelet within %v of the switch: %s", n, r.tokenCount(), r.sw.to, time.Since(switched).Round(time.Second), strings.Join(why, "; "))
		o.observe("%d/%d tokens refreshed", n, r.tokenCount())
	}
	for _, p := range r.pods {
		for path := range p.tokens {
			jwt, _ := readInContainer(p.pid, path)
			c, err := parseTokenClaims(jwt)
			o.want(err == nil && c.Kubernetes.Pod.UID == string(p.pod.UID), "%s: %s after the switch is not a token bound to the pod: %v", p.pod.Name, path, err)
		}
	}
}

// refusalOf says, for a failure message, why the new kubelet did not set
// up the volume key again: nodevol's refusal of a mount it has no record of
// (adoption is what takes the stock kubelet's tmpfs over), another SetUp
// error, or nothing logged.
func (r *switchRun) refusalOf(ops *volumeOps, key string) string {
	res := ops.setUp[key]
	switch {
	case res.failed > 0 && isNoRecordRefusal(res.firstError):
		return fmt.Sprintf("nodevol refuses to set up %s on the tmpfs the stock kubelet mounted, because it has no record of mounting it (\"no record\" refusal: the tmpfs is not adopted; %d failed SetUps)", key, res.failed)
	case res.failed > 0:
		return fmt.Sprintf("%s's SetUp failed %d times, the first: %s", key, res.failed, strings.ReplaceAll(res.firstError, r.k.root, "$ROOT"))
	}
	return fmt.Sprintf("the %s kubelet logged no failed SetUp of %s", r.sw.to, key)
}

// isNoRecordRefusal reports whether a SetUp or TearDown error is nodevol's
// refusal of a mount it has no record of making.
func isNoRecordRefusal(err string) bool {
	return strings.Contains(err, "did not record") || strings.Contains(err, "no record")
}

func (r *switchRun) updateConfigMap(ctx context.Context, value string) error {
	var cm corev1.ConfigMap
	path := "/api/v1/namespaces/default/configmaps/" + r.configMap
	if err := r.api.get(ctx, path, &cm); err != nil {
		return err
	}
	cm.Data = map[string]string{switchConfigKey: value}
	return r.api.do(ctx, http.MethodPut, path, &cm, nil)
}

func (r *switchRun) tokenCount() int {
	n := 0
	for _, p := range r.pods {
		n += len(p.tokens)
	}
	return n
}

// tokensChanged counts the token files whose content in the container is
// no longer what it was before the switch.
func (r *switchRun) tokensChanged() int {
	n := 0
	for _, p := range r.pods {
		for path, before := range p.tokens {
			if now, err := readInContainer(p.pid, path); err == nil && now != before && now != "" {
				n++
			}
		}
	}
	return n
}

// checkStillRunning checks, a while after the switch (the new kubelet has
// synced the pods), that the containers are the ones from before: the same
// process, the same container ID, no restart, the pod Running.
func (r *switchRun) checkStillRunning(ctx context.Context) {
	o := r.o
	ok := true
	for _, p := range r.pods {
		ok = o.want(processAlive(p.pid), "%s: its container's process %d is gone", p.pod.Name, p.pid) && ok
		got, err := r.api.apiPod(ctx, p.pod.Namespace, p.pod.Name)
		if err != nil {
			o.harness(err)
			return
		}
		cs := got.Status.ContainerStatuses
		if !o.want(len(cs) == 1, "%s: %d container statuses", p.pod.Name, len(cs)) {
			ok = false
			continue
		}
		ok = o.want(got.Status.Phase == corev1.PodRunning, "%s: phase %s after the switch", p.pod.Name, got.Status.Phase) && ok
		ok = o.want(cs[0].RestartCount == 0, "%s: %d container restarts after the switch", p.pod.Name, cs[0].RestartCount) && ok
		ok = o.want(cs[0].ContainerID == p.containerID, "%s: container %s after the switch; %s before", p.pod.Name, cs[0].ContainerID, p.containerID) && ok
	}
	if ok {
		o.observe("pods Running, same containers, 0 restarts")
	}
}

// checkSameMounts checks that each tmpfs is still the one mount the first
// kubelet made (by mount ID), alone on its directory: the new kubelet
// served it in place, neither stacking a mount on it nor replacing it
// (which the running container, holding the old one, would not see).
func (r *switchRun) checkSameMounts() {
	o := r.o
	same, total := 0, 0
	for _, p := range r.pods {
		for name, before := range p.mounts {
			total++
			dir := before.Mountpoint
			ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
			if err != nil {
				o.harness(err)
				return
			}
			var ids []string
			for _, m := range ms {
				ids = append(ids, fmt.Sprintf("%d (%s %s)", m.ID, m.FSType, m.Source))
			}
			if o.want(len(ms) == 1 && ms[0].ID == before.ID, "%s: volume %s: mounts %s on it after the switch; before, mount %d alone", p.pod.Name, name, strings.Join(ids, ", "), before.ID) {
				same++
			}
		}
	}
	o.observe("%d/%d tmpfs the same mount", same, total)
}

// deleteAndTearDown deletes the pods through the API and waits until
// their directories are gone. With a NAS, the nas pod's Default volume
// must be refused (≥2 tries with growing delays) and the NAS kept byte for
// byte until it is unmounted, then torn down. When the pods' directories
// stay because TearDown is refused for want of a record, the stock
// kubelet's tmpfs are unmounted by hand, as docs/kubelet.md tells an
// operator to, and the teardown must then finish.
func (r *switchRun) deleteAndTearDown(ctx context.Context, nas *switchNAS) {
	o, k := r.o, r.k
	offset, err := k.logSize()
	if err != nil {
		o.harness(err)
		return
	}
	for _, p := range r.pods {
		if err := r.api.deletePod(ctx, p.pod); err != nil {
			o.harness(err)
			return
		}
	}
	t0 := time.Now()
	if nas != nil {
		r.nasRefused(ctx, nas, offset, t0)
	}
	gone := func() (bool, error) {
		for _, p := range r.pods {
			if _, err := os.Lstat(k.podDir(p.pod)); !os.IsNotExist(err) {
				return false, nil
			}
		}
		return true, k.alive()
	}
	err = poll(ctx, switchTeardownLimit, gone)
	if err != nil {
		left := r.leftAfterDeletion(offset)
		o.want(false, "the pods' directories are still there %v after their deletion: %s", time.Since(t0).Round(time.Second), strings.Join(left, "; "))
		unmounted := r.unmountRefused(offset)
		if len(unmounted) == 0 {
			o.observe("NOT torn down")
			return
		}
		o.fact("unmounted by hand (umount DIR, as docs/kubelet.md tells an operator), after nodevol refused them for want of a record: %s", strings.Join(unmounted, ", "))
		t1 := time.Now()
		if err := poll(ctx, 2*time.Minute, gone); err != nil {
			o.want(false, "the pods' directories are still there after the refused tmpfs were unmounted by hand: %s", strings.Join(r.leftAfterDeletion(offset), "; "))
			o.observe("NOT torn down, even after %d tmpfs unmounted by hand", len(unmounted))
			return
		}
		o.observe("torn down only after %d tmpfs unmounted by hand", len(unmounted))
		o.time("refused tmpfs unmounted by hand → pod directories gone", time.Since(t1))
	} else {
		o.time("pods deleted → pod directories gone", time.Since(t0))
		o.observe("torn down")
		if span, err := k.teardownSpan(offset, r.app.pod, "mem"); err == nil {
			o.time("Memory emptyDir: UnmountVolume started → TearDown succeeded (kubelet log)", span)
		}
	}
	for _, p := range r.pods {
		if ms, err := mountsUnder(k.podDir(p.pod)); err != nil || len(ms) > 0 {
			o.want(false, "%s: mounts left below its removed directory: %v %v", p.pod.Name, ms, err)
		}
	}
	err = poll(ctx, 30*time.Second, func() (bool, error) {
		for _, p := range r.pods {
			if _, err := r.api.apiPod(ctx, p.pod.Namespace, p.pod.Name); !errors.Is(err, ErrNotFound) {
				return false, nil
			}
		}
		return true, nil
	})
	if o.want(err == nil, "the pods are still in the API server: %v", err) {
		o.observe("pods gone from the API")
	}
}

// nasRefused checks the nas pod's Default volume while the NAS is mounted
// in it: its TearDown must be refused at least twice, with growing delays,
// naming the NAS, and the NAS and the volume's own files must be intact;
// then it unmounts the NAS and waits for the volume's TearDown to succeed.
func (r *switchRun) nasRefused(ctx context.Context, nas *switchNAS, offset int64, deleted time.Time) {
	o, k := r.o, r.k
	attempts := teardownAttempts{re: teardownLine(r.nas.pod, scratchVolume)}
	err := poll(ctx, 90*time.Second, func() (bool, error) {
		return attempts.failures() >= 2 || attempts.succeeded(), errors.Join(attempts.read(k, offset), k.alive())
	})
	if err != nil {
		o.harness(fmt.Errorf("waiting for two TearDown attempts of the NAS pod's volume: %w", err))
	} else {
		o.time("pods deleted → second refused TearDown of the NAS's volume", time.Since(deleted))
	}
	left, ok := readFileOr(filepath.Join(nas.path, "SENTINEL"))
	if o.want(ok && bytes.Equal([]byte(left), nas.sentinel), "the NAS's sentinel is %s", map[bool]string{true: "changed", false: "gone"}[ok]) {
		o.observe("NAS sentinel intact")
		o.fact("NAS sentinel intact after the refusals: %d bytes, sha256 %x", len(nas.sentinel), sha256.Sum256(nas.sentinel))
	}
	own, _ := readFileOr(filepath.Join(nas.vol, "own-file"))
	fromPod, _ := readFileOr(filepath.Join(nas.vol, "from-pod"))
	o.want(own == string(nas.own) && fromPod == fromPodText+"\n", "the NAS pod's volume's own files were touched")
	o.want(attempts.failures() >= 2, "want ≥2 refused TearDowns of the NAS pod's volume, saw %d", attempts.failures())
	if o.want(attempts.everyFailureRefuses(nas.path), "not every TearDown failure of the NAS pod's volume is nodevol's refusal naming the NAS %s", nas.path) {
		o.observe("NAS refused, %d tries", attempts.failures())
	}
	if first := attempts.firstFailure(k.root); first != "" {
		o.fact("first TearDown error of the NAS pod's volume: %s", first)
	}
	d := attempts.delays()
	o.want(delaysGrow(d), "retry delays do not grow: %s", strings.Join(d, ", "))
	o.fact("NAS refusal retry delays: %s", strings.Join(d, ", "))
	if err := unix.Unmount(nas.path, 0); err != nil {
		o.harness(&os.PathError{Op: "umount", Path: nas.path, Err: err})
		return
	}
	nas.mounted = false
	t1 := time.Now()
	err = poll(ctx, 90*time.Second, func() (bool, error) {
		if err := attempts.read(k, offset); err != nil {
			return false, err
		}
		_, err := os.Lstat(nas.vol)
		return attempts.succeeded() && os.IsNotExist(err), k.alive()
	})
	if o.want(err == nil, "the NAS pod's volume was not torn down after the NAS's unmount: %v", err) {
		o.observe("its volume gone after umount")
		o.time("NAS unmounted → its volume torn down", time.Since(t1))
	}
}

// leftAfterDeletion describes what is left of the deleted pods: each
// mount below their directories, the volumes whose TearDown nodevol
// refused for want of a record (with one of the errors), and each other
// failed TearDown with its first error.
func (r *switchRun) leftAfterDeletion(offset int64) []string {
	var out, refused []string
	example := ""
	for _, p := range r.pods {
		dir := r.k.podDir(p.pod)
		if _, err := os.Lstat(dir); os.IsNotExist(err) {
			continue
		}
		ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		var mounts []string
		for _, m := range ms {
			mounts = append(mounts, fmt.Sprintf("%s [%s from %s]", strings.TrimPrefix(m.Mountpoint, dir+"/"), m.FSType, m.Source))
		}
		out = append(out, fmt.Sprintf("%s: %d mounts left (%s)", p.pod.Name, len(ms), strings.Join(mounts, ", ")))
		ops := newVolumeOps(string(p.pod.UID))
		ops.offset = offset
		_ = ops.read(r.k)
		for _, v := range p.vols {
			res := ops.tearDown[v.key]
			if res.failed == 0 || res.succeeded > 0 {
				continue
			}
			msg := strings.ReplaceAll(res.firstError, r.k.root, "$ROOT")
			if isNoRecordRefusal(res.firstError) {
				refused = append(refused, fmt.Sprintf("%s/%s (%d tries)", p.pod.Name, v.key, res.failed))
				if example == "" {
					example = msg
				}
				continue
			}
			out = append(out, fmt.Sprintf("%s: %s TearDown failed %d times, the first: %s", p.pod.Name, v.key, res.failed, msg))
		}
	}
	if len(refused) > 0 {
		out = append(out, fmt.Sprintf("TearDown refused by nodevol for want of a record of the stock kubelet's tmpfs (\"no record\": not adopted): %s; the first error: %s", strings.Join(refused, ", "), example))
	}
	return out
}

// unmountRefused unmounts each tmpfs on a volume directory of the pods
// whose TearDown nodevol refused for want of a record (only those), and
// returns them.
func (r *switchRun) unmountRefused(offset int64) []string {
	var done []string
	for _, p := range r.pods {
		ops := newVolumeOps(string(p.pod.UID))
		ops.offset = offset
		_ = ops.read(r.k)
		for _, v := range p.vols {
			res := ops.tearDown[v.key]
			if res.failed == 0 || res.succeeded > 0 || !isNoRecordRefusal(res.firstError) {
				continue
			}
			if m, err := mountAt(v.dir); err != nil || m == nil || m.FSType != "tmpfs" {
				continue
			}
			if err := unix.Unmount(v.dir, 0); err != nil {
				r.o.harness(&os.PathError{Op: "umount", Path: v.dir, Err: err})
				continue
			}
			done = append(done, p.pod.Name+"/"+v.key)
		}
	}
	return done
}

// checkNothingLeft checks the kubelet root once the pods are gone: no
// mount, no pod directory, no file of nodevol's, no ready marker, no
// immutable or append-only inode, no directory with a quota project, and
// the quota bookkeeping files as before the scenario.
func (r *switchRun) checkNothingLeft(quotaFilesBefore string) {
	o := r.o
	left, err := rootLeftovers(r.k.root)
	if err != nil {
		o.harness(err)
		return
	}
	if now := quotaFiles(); now != quotaFilesBefore {
		left = append(left, fmt.Sprintf("the quota bookkeeping changed: %s before, %s after", quotaFilesBefore, now))
	}
	if o.want(len(left) == 0, "left under the kubelet root: %s", strings.Join(left, "; ")) {
		o.observe("nothing left")
	} else {
		o.observe("%d things left", len(left))
	}
	o.fact("kubelet root %s: project quotas %s; %s", r.k.root, quotaSupport(r.k.root), quotaFilesBefore)
}

// volumeOps is what a kubelet's log says about the SetUps and TearDowns of
// one pod's volumes, by key ("configmap/config").
type volumeOps struct {
	setUpRe, tearDownRe *regexp.Regexp
	offset              int64
	setUp, tearDown     map[string]opResults
}

// opResults counts one volume's operations of one kind.
type opResults struct {
	succeeded, failed int
	firstError        string // the first failure's error, after the kubelet's prefix
}

// newVolumeOps matches the kubelet v1.37's lines for the pod's volumes:
// "MountVolume.SetUp succeeded|failed for volume "<name>" (UniqueName:
// "kubernetes.io/<plugin>/<uid>-<name>") …" and "UnmountVolume.TearDown
// succeeded|failed for volume "kubernetes.io/<plugin>/<uid>-<name>" …",
// quoted with backslashes when they are a structured message.
func newVolumeOps(uid string) *volumeOps {
	u := regexp.QuoteMeta(uid)
	return &volumeOps{
		setUpRe:    regexp.MustCompile(`MountVolume\.SetUp (succeeded|failed) for volume \\?"[^"\\]*\\?" \(UniqueName: \\?"kubernetes\.io/([^/"\\]+)/` + u + `-([^"\\]+)\\?"\)`),
		tearDownRe: regexp.MustCompile(`UnmountVolume\.TearDown (succeeded|failed) for volume \\?"kubernetes\.io/([^/"\\]+)/` + u + `-([^"\\]+)\\?"`),
		setUp:      map[string]opResults{},
		tearDown:   map[string]opResults{},
	}
}

// read adds the kubelet's log lines since the last read.
func (v *volumeOps) read(k *kubelet) error {
	lines, next, err := k.logLines(v.offset, regexp.MustCompile(`MountVolume\.SetUp|UnmountVolume\.TearDown`))
	if err != nil {
		return err
	}
	v.offset = next
	for _, l := range lines {
		v.add(l)
	}
	return nil
}

// add counts one log line. A failure counts once, on the line the kubelet
// logs per failed operation (with its retry delay).
func (v *volumeOps) add(line string) {
	for _, op := range []struct {
		re  *regexp.Regexp
		res map[string]opResults
	}{{v.setUpRe, v.setUp}, {v.tearDownRe, v.tearDown}} {
		loc := op.re.FindStringSubmatchIndex(line)
		if loc == nil {
			continue
		}
		outcome, key := line[loc[2]:loc[3]], line[loc[4]:loc[5]]+"/"+line[loc[6]:loc[7]]
		res := op.res[key]
		switch {
		case outcome == "succeeded":
			res.succeeded++
		case retryLine.MatchString(line):
			res.failed++
			if res.failed == 1 {
				_, res.firstError, _ = strings.Cut(line[loc[1]:], ") : ")
				res.firstError = strings.TrimSpace(res.firstError)
			}
		}
		op.res[key] = res
	}
}

// allSetUp reports whether every volume has a successful SetUp.
func (v *volumeOps) allSetUp(vols []podVolume) bool {
	for _, vol := range vols {
		if v.setUp[vol.key].succeeded == 0 {
			return false
		}
	}
	return true
}

// containerProcess is the PID, in this pid namespace, of the container's
// first process: the one in the container's cgroup (…/pod<uid>/<id>, in
// any hierarchy) whose parent (the shim) is not.
func containerProcess(podUID, containerID string) (int, error) {
	suffix := "/pod" + podUID + "/" + containerID
	inContainer := func(pid string) bool {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
		if err != nil {
			return false
		}
		return slices.ContainsFunc(strings.Split(string(b), "\n"), func(l string) bool { return strings.HasSuffix(l, suffix) })
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !inContainer(e.Name()) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The parent PID is the second field after the command, which is
		// in parentheses and may itself contain ") ".
		k := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[k+1:]))
		if len(f) > 1 && !inContainer(f[1]) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process of container %s (pod %s) in the namespace", containerID, podUID)
}

// processAlive reports whether pid is a live (not zombie) process.
func processAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	k := bytes.LastIndexByte(b, ')')
	return k >= 0 && k+2 < len(b) && b[k+2] != 'Z'
}

// readInContainer reads path as the container's process sees it: through
// its root, in its mount namespace (a tmpfs mounted over the volume's on
// the host after the container started is not there).
func readInContainer(pid int, path string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "root", path))
	return string(b), err
}

// fsImmutableFL and fsAppendFL are FS_IMMUTABLE_FL and FS_APPEND_FL
// (linux/fs.h; lsattr's i and a).
const (
	fsImmutableFL = 0x00000010
	fsAppendFL    = 0x00000020
)

// adoptionLine is what nodevol logs once per volume whose tmpfs it adopts.
var adoptionLine = regexp.MustCompile(`Adopted the previous kubelet's mount as the volume's own`)

// checkAdoptions checks that nodevol-kubelet logged one adoption for each
// tmpfs the stock kubelet mounted (and none for another volume).
func (r *switchRun) checkAdoptions(k *kubelet) {
	o := r.o
	lines, _, err := k.logLines(0, adoptionLine)
	if err != nil {
		o.harness(fmt.Errorf("reading the kubelet's log: %w", err))
		return
	}
	want, adopted := 0, 0
	for _, p := range r.pods {
		for _, v := range p.vols {
			n := 0
			for _, l := range lines {
				if strings.Contains(l, `volume="`+v.dir+`"`) {
					n++
				}
			}
			if v.tmpfs {
				want++
				o.want(n == 1, "%s: %s: %d adoption log lines, want 1", p.pod.Name, v.key, n)
			} else {
				o.want(n == 0, "%s: %s is not a tmpfs, and %d adoption log lines name it", p.pod.Name, v.key, n)
			}
			adopted += n
		}
	}
	o.want(len(lines) == want, "%d adoption log lines, want %d (one per tmpfs)", len(lines), want)
	o.observe("%d/%d tmpfs adopted (log)", adopted, want)
}

// rootLeftovers walks the kubelet root (without following symlinks or
// leaving it for another filesystem's mount without saying so) and lists
// what a switch could leave behind: mounts below it, pod directories,
// files of nodevol's (any name with "nodevol": nodevol.json and its
// temporary files), ready markers below pods/, immutable or append-only
// inodes, and directories with a project ID.
func rootLeftovers(root string) ([]string, error) {
	var left []string
	rel := func(p string) string { return "$ROOT" + strings.TrimPrefix(p, root) }
	ms, err := mountsUnder(root)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m != root {
			left = append(left, "mount "+rel(m))
		}
	}
	pods, err := os.ReadDir(filepath.Join(root, "pods"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, p := range pods {
		left = append(left, "pod directory "+rel(filepath.Join(root, "pods", p.Name())))
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			left = append(left, fmt.Sprintf("unreadable %s: %v", rel(path), err))
			return nil
		}
		name := d.Name()
		switch {
		case path == filepath.Join(root, "nodevol-sessions.json"):
			// The session log stays by design: it is what tells a
			// later nodevol which mounts were made while none ran
			// (docs/kubelet.md), and no kubelet reads it.
		case strings.Contains(name, "nodevol"):
			left = append(left, "nodevol file "+rel(path))
		case name == "ready" && strings.HasPrefix(path, filepath.Join(root, "pods")+"/"):
			left = append(left, "ready marker "+rel(path))
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil // sockets, symlinks: no inode flags to read without opening them
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // gone meanwhile, or not ours to open
		}
		defer unix.Close(fd)
		if flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS); err == nil && flags&(fsImmutableFL|fsAppendFL) != 0 {
			left = append(left, fmt.Sprintf("inode flags %#x (immutable or append-only) on %s", flags, rel(path)))
		}
		if d.IsDir() {
			if id, err := fsquota.ProjectID(path); err == nil && id != 0 {
				left = append(left, fmt.Sprintf("quota project %d on %s", id, rel(path)))
			}
		}
		return nil
	})
	return left, err
}

// quotaFiles describes the host's project quota bookkeeping files
// (fsquota's defaults, which a kubelet with quotas and nodevol share): each
// one's size and sha256, or that it does not exist.
func quotaFiles() string {
	var out []string
	for _, f := range []string{fsquota.DefaultProjectsFile, fsquota.DefaultProjidFile} {
		b, err := os.ReadFile(f)
		switch {
		case os.IsNotExist(err):
			out = append(out, f+" absent")
		case err != nil:
			out = append(out, fmt.Sprintf("%s: %v", f, err))
		default:
			out = append(out, fmt.Sprintf("%s %d bytes sha256 %.12x", f, len(b), sha256.Sum256(b)))
		}
	}
	return strings.Join(out, ", ")
}

// quotaSupport says whether the filesystem of dir has project quotas.
func quotaSupport(dir string) string {
	if err := fsquota.New().CheckSupport(dir); err != nil {
		return "unsupported (" + err.Error() + ")"
	}
	return "supported"
}
