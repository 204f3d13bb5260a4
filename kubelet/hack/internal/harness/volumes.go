package harness

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// memorySizeLimit is scenario 3's sizeLimit; the tmpfs must show it as
// size=16384k (below the node's allocatable memory, it is the size).
const (
	memorySizeLimit = "16Mi"
	memoryTmpfsSize = "size=16384k"
)

func expectMemory(flavor) string {
	return "tmpfs " + memoryTmpfsSize + "; nothing left"
}

// memoryScenario: a Memory emptyDir with a sizeLimit is a tmpfs of that
// size, and its teardown leaves nothing.
func memoryScenario(ctx context.Context, env *scenarioEnv, o *outcome) {
	limit := resource.MustParse(memorySizeLimit)
	pod := busyboxPod(env.podName, env.uid, "echo "+fromPodText+" > /mem/from-pod",
		[]corev1.VolumeMount{{Name: scratchVolume, MountPath: "/mem"}},
		[]corev1.Volume{{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}}})
	if !startPod(ctx, env, pod, o) {
		return
	}
	vol := env.kubelet.volumeDir(pod, emptyDirDir, scratchVolume)
	m, err := mountAt(vol)
	if err != nil {
		o.harness(err)
		return
	}
	if o.want(m != nil, "no mount on the Memory volume %s", vol) {
		o.observe("%s %s", m.FSType, sizeOption(m.VFSOptions))
		o.fact("volume mount: %s %s, source %s, options %s", m.FSType, m.Mountpoint, m.Source, m.VFSOptions)
		o.want(m.FSType == "tmpfs", "the volume is %s, not tmpfs", m.FSType)
		o.want(strings.Contains(","+m.VFSOptions+",", ","+memoryTmpfsSize+","), "tmpfs options %q lack %s", m.VFSOptions, memoryTmpfsSize)
		o.want(strings.HasPrefix(m.Source, nodevolTmpfsSource) == (env.flavor == nodevolKubelet),
			"the %s kubelet's tmpfs has source %q (nodevol's begin %s)", env.flavor, m.Source, nodevolTmpfsSource)
	}
	if offset, ok := removeAndWaitGone(ctx, env, pod, o); ok {
		timeTearDown(env, offset, pod, o)
	}
}

// sizeOption is the size= option of a tmpfs's options, or "no size".
func sizeOption(opts string) string {
	for _, o := range strings.Split(opts, ",") {
		if strings.HasPrefix(o, "size=") {
			return o
		}
	}
	return "no size"
}

// removeAndWaitGone deletes the pod and waits for its directory to go,
// timing it. It returns the kubelet log's offset from before the deletion,
// and false when the pod could not be deleted.
func removeAndWaitGone(ctx context.Context, env *scenarioEnv, pod *corev1.Pod, o *outcome) (int64, bool) {
	offset, err := env.kubelet.removePod(pod)
	if err != nil {
		o.harness(err)
		return 0, false
	}
	t0 := time.Now()
	if waitPodGone(ctx, env, pod, 90*time.Second, o) {
		o.time("manifest removed → pod directory gone", time.Since(t0))
		o.observe("nothing left")
	}
	return offset, true
}

// timeTearDown adds the kubelet's own measure of the emptyDir volume's
// teardown, from its log lines after offset.
func timeTearDown(env *scenarioEnv, offset int64, pod *corev1.Pod, o *outcome) {
	if span, err := env.kubelet.teardownSpan(offset, pod, scratchVolume); err != nil {
		o.harness(err)
	} else {
		o.time("UnmountVolume started → TearDown succeeded (kubelet log)", span)
	}
}

func expectWrapped(f flavor) string {
	if f == nodevolKubelet {
		return "downwardAPI and projected files right, each a tmpfs of nodevol's; API pod's token bound to it; nothing left, pods gone from the API"
	}
	return "downwardAPI and projected files right, each a tmpfs; API pod's token bound to it; nothing left, pods gone from the API"
}

// nodevolTmpfsSource is how the source of every tmpfs nodevol's plugin
// mounts begins (scenario 3 shows it too): "nv-<8 hex>-<8 hex>".
const nodevolTmpfsSource = "nv-"

// wrappedScenario: a downwardAPI volume and a projected volume (its
// sources downwardAPI only) each wrap an emptyDir (a Memory one, set up
// through NewWrapperMounter, torn down through UnmountViaEmptyDir); their
// files are right, each is a tmpfs mounted by the kubelet's emptyDir
// plugin (nodevol's, for the nodevol kubelet), and their teardown leaves
// nothing.
//
// The projected plugin refuses every SetUp without a kube client ("cannot
// setup projected volume … because kube client is not configured"), even
// for downwardAPI sources: this is what the control plane is for. The pod
// is still a static pod (the kubelet creates its mirror pod, checked
// here), so it cannot use secrets, configMaps or service-account tokens:
// NodeRestriction refuses mirror pods that reference them. A second pod,
// created through the API and bound by spec.nodeName, has a projected
// volume with a serviceAccountToken source (TokenRequest, signed with the
// control plane's service-account key) beside a downwardAPI source.
func wrappedScenario(ctx context.Context, env *scenarioEnv, o *outcome) {
	pod := busyboxPod(env.podName, env.uid, "cat /podinfo/name /podinfo/meta/uid /projected/name /projected/meta/uid > /dev/null",
		[]corev1.VolumeMount{{Name: "podinfo", MountPath: "/podinfo"}, {Name: "projected", MountPath: "/projected"}},
		[]corev1.Volume{
			{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "meta/uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
				{Path: "meta/namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
			}}}},
			{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
					{Path: "meta/uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
				}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				}}},
			}}}},
		})
	// The pod created through the API starts meanwhile.
	token, err := env.api.createPod(ctx, tokenPod(fmt.Sprintf("s4-token-%s", env.flavor)))
	if err != nil {
		o.harness(err)
		return
	}
	if !startPod(ctx, env, pod, o) {
		return
	}
	if err := env.kubelet.waitRunning(ctx, token); err != nil {
		o.harness(err)
		return
	}
	k := env.kubelet
	mirror, err := env.api.mirrorPod(ctx, pod)
	if o.want(err == nil, "no mirror pod in the API server: %v", err) {
		o.fact("mirror pod %s/%s, uid %s", mirror.Namespace, mirror.Name, mirror.UID)
	}
	downward := k.volumeDir(pod, "kubernetes.io~downward-api", "podinfo")
	projected := k.volumeDir(pod, "kubernetes.io~projected", "projected")
	files := []struct{ path, want string }{
		{filepath.Join(downward, "name"), staticPodName(pod)},
		{filepath.Join(downward, "labels"), fmt.Sprintf("app=%q", pod.Name)},
		{filepath.Join(downward, "meta/uid"), env.uid},
		{filepath.Join(downward, "meta/namespace"), pod.Namespace},
		{filepath.Join(projected, "name"), staticPodName(pod)},
		{filepath.Join(projected, "meta/uid"), env.uid},
		{filepath.Join(projected, "labels"), fmt.Sprintf("app=%q", pod.Name)},
	}
	right := 0
	for _, f := range files {
		got, _ := readFileOr(f.path)
		if o.want(got == f.want, "%s = %q; want %q", strings.TrimPrefix(f.path, k.podDir(pod)+"/"), got, f.want) {
			right++
		}
	}
	o.observe("%d/%d files right", right, len(files))
	tmpfs := 0
	for _, dir := range []string{downward, projected} {
		m, err := mountAt(dir)
		if err != nil {
			o.harness(err)
			return
		}
		if !o.want(m != nil, "no mount on %s", dir) {
			continue
		}
		o.fact("volume mount: %s %s, source %s", m.FSType, m.Mountpoint, m.Source)
		ok := o.want(m.FSType == "tmpfs", "%s is %s, not tmpfs", dir, m.FSType)
		if env.flavor == nodevolKubelet {
			ok = o.want(strings.HasPrefix(m.Source, nodevolTmpfsSource), "%s: source %q, not nodevol's %s…", dir, m.Source, nodevolTmpfsSource) && ok
		}
		if ok {
			tmpfs++
		}
	}
	if env.flavor == nodevolKubelet {
		o.observe("%d/2 tmpfs of nodevol's", tmpfs)
	} else {
		o.observe("%d/2 tmpfs", tmpfs)
	}
	checkTokenPod(env, token, o)
	if err := env.api.deletePod(ctx, token); err != nil {
		o.harness(err)
		return
	}
	removeAndWaitGone(ctx, env, pod, o)
	if waitPodGone(ctx, env, token, 90*time.Second, o) {
		err := poll(ctx, 30*time.Second, func() (bool, error) {
			_, err := env.api.apiPod(ctx, token.Namespace, token.Name)
			return errors.Is(err, ErrNotFound), nil
		})
		if o.want(err == nil, "the token pod is still in the API server: %v", err) {
			o.observe("API pod gone")
		}
	}
	if mirror != nil {
		err := poll(ctx, 30*time.Second, func() (bool, error) {
			_, err := env.api.mirrorPod(ctx, pod)
			return errors.Is(err, ErrNotFound), nil
		})
		if o.want(err == nil, "the mirror pod is still in the API server: %v", err) {
			o.observe("mirror pod gone")
		}
	}
}

func expectSubPath(flavor) string {
	return "subPath mount gone no later than the volume; nothing left"
}

// subPathScenario: a container mounts a subdirectory of a Default emptyDir
// (subPath); the kubelet bind-mounts it under volume-subpaths/ and must
// clean that up before it tears the volume down. This is also the plain
// case (no NAS) whose removal-to-gone time the table compares.
func subPathScenario(ctx context.Context, env *scenarioEnv, o *outcome) {
	pod := busyboxPod(env.podName, env.uid, "echo "+fromPodText+" > /sub/from-pod",
		[]corev1.VolumeMount{{Name: scratchVolume, MountPath: "/data"}, {Name: scratchVolume, MountPath: "/sub", SubPath: "sub"}},
		[]corev1.Volume{{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}})
	if !startPod(ctx, env, pod, o) {
		return
	}
	k := env.kubelet
	vol := k.volumeDir(pod, emptyDirDir, scratchVolume)
	subpaths := filepath.Join(k.podDir(pod), "volume-subpaths")
	written := filepath.Join(vol, "sub", "from-pod")
	var got string
	_ = poll(ctx, 10*time.Second, func() (bool, error) { got, _ = readFileOr(written); return got == fromPodText+"\n", nil })
	o.want(got == fromPodText+"\n", "sub/from-pod = %q; want %q", got, fromPodText+"\n")
	ms, err := mountsUnder(subpaths)
	if err != nil {
		o.harness(err)
		return
	}
	if !o.want(len(ms) == 1, "want one subPath mount under %s, found %d", subpaths, len(ms)) {
		return
	}
	o.fact("subPath mounted at %s", strings.TrimPrefix(ms[0], k.podDir(pod)+"/"))

	offset, err := k.removePod(pod)
	if err != nil {
		o.harness(err)
		return
	}
	t0 := time.Now()
	var subGone, volGone time.Duration
	err = poll(ctx, 90*time.Second, func() (bool, error) {
		now := time.Since(t0)
		if subGone == 0 {
			if ms, err := mountsUnder(subpaths); err == nil && len(ms) == 0 {
				subGone = now
			}
		}
		if volGone == 0 {
			if _, err := os.Lstat(vol); os.IsNotExist(err) {
				volGone = now
			}
		}
		_, err := os.Lstat(k.podDir(pod))
		return os.IsNotExist(err), k.alive()
	})
	if !o.want(err == nil, "pod directory still there: %v", err) {
		return
	}
	if !o.want(subGone != 0 && volGone != 0, "the polls never saw the subPath mount (%v) or the volume (%v) go", subGone, volGone) {
		return
	}
	o.want(subGone <= volGone, "the subPath mount outlived the volume (gone at %v, volume at %v)", subGone, volGone)
	o.time("manifest removed → subPath mount gone", subGone)
	o.time("manifest removed → volume gone (no NAS)", volGone)
	o.time("manifest removed → pod directory gone", time.Since(t0))
	timeTearDown(env, offset, pod, o)
	if ms, err := mountsUnder(k.podDir(pod)); err != nil || len(ms) > 0 {
		o.want(false, "mounts left below the pod directory: %v %v", ms, err)
		return
	}
	if volGone-subGone < pollInterval {
		o.observe("subPath and volume gone within one %v poll; nothing left", pollInterval)
	} else {
		o.observe("subPath gone %v before the volume; nothing left", (volGone - subGone).Round(time.Millisecond))
	}
}

// tokenAudience is the audience of the projected service-account token.
const tokenAudience = "nodevol-e2e"

// tokenPod is a pod for the API (not a static pod: NodeRestriction refuses
// mirror pods with service-account tokens), bound to the node by
// spec.nodeName (there is no scheduler), with a projected volume of a
// serviceAccountToken source and a downwardAPI source. No token is
// automounted: without kube-controller-manager there is no
// kube-root-ca.crt ConfigMap for it.
func tokenPod(name string) *corev1.Pod {
	expiry := int64(3600)
	automount := false
	pod := busyboxPod(name, "", "cat /token/token /token/name > /dev/null",
		[]corev1.VolumeMount{{Name: "token", MountPath: "/token"}},
		[]corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: tokenAudience, ExpirationSeconds: &expiry, Path: "token"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			}}},
		}}}}})
	pod.Spec.NodeName = nodeName
	pod.Spec.ServiceAccountName = "default"
	pod.Spec.AutomountServiceAccountToken = &automount
	return pod
}

// tokenClaims are the claims of a bound service-account token that
// scenario 4 checks.
type tokenClaims struct {
	Audience   []string `json:"aud"`
	Subject    string   `json:"sub"`
	Kubernetes struct {
		Pod struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// parseTokenClaims reads a JWT's claims without checking its signature:
// the API server issued it, and scenario 4 asks only whether the kubelet
// put the right one in the volume.
func parseTokenClaims(jwt string) (tokenClaims, error) {
	var c tokenClaims
	parts := strings.Split(strings.TrimSpace(jwt), ".")
	if len(parts) != 3 {
		return c, fmt.Errorf("not a JWT: %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return c, fmt.Errorf("JWT claims: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("JWT claims: %w", err)
	}
	return c, nil
}

// checkTokenPod checks the running API pod's projected volume: the token is
// bound to the pod for the audience, the downwardAPI file is right, and
// the volume is a tmpfs (nodevol's, for the nodevol kubelet).
func checkTokenPod(env *scenarioEnv, pod *corev1.Pod, o *outcome) {
	vol := env.kubelet.volumeDir(pod, "kubernetes.io~projected", "token")
	name, _ := readFileOr(filepath.Join(vol, "name"))
	o.want(name == pod.Name, "token pod: name = %q; want %q", name, pod.Name)
	jwt, _ := readFileOr(filepath.Join(vol, "token"))
	c, err := parseTokenClaims(jwt)
	okToken := o.want(err == nil, "token pod: token: %v", err) &&
		o.want(slices.Contains(c.Audience, tokenAudience), "token pod: token audience %q; want %q", c.Audience, tokenAudience) &&
		o.want(c.Subject == "system:serviceaccount:default:default", "token pod: token subject %q", c.Subject) &&
		o.want(c.Kubernetes.Pod.UID == string(pod.UID), "token pod: token bound to pod uid %q; want %q", c.Kubernetes.Pod.UID, pod.UID)
	m, err := mountAt(vol)
	if err != nil {
		o.harness(err)
		return
	}
	okMount := o.want(m != nil && m.FSType == "tmpfs", "token pod: %s is not a tmpfs", vol)
	if m != nil {
		o.fact("token pod %s (uid %s): volume mount: %s %s, source %s", pod.Name, pod.UID, m.FSType, m.Mountpoint, m.Source)
		if env.flavor == nodevolKubelet {
			okMount = o.want(strings.HasPrefix(m.Source, nodevolTmpfsSource), "token pod: %s: source %q, not nodevol's", vol, m.Source) && okMount
		}
	}
	if okToken && okMount {
		o.observe("API pod's token bound to it, a tmpfs")
	}
}
