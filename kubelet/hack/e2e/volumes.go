package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	}
	offset, err := env.kubelet.logSize()
	if err != nil {
		o.harness(err)
		return
	}
	removeAndWaitGone(ctx, env, pod, o)
	timeTearDown(env, offset, pod, o)
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
// timing it.
func removeAndWaitGone(ctx context.Context, env *scenarioEnv, pod *corev1.Pod, o *outcome) {
	if err := env.kubelet.removePod(pod); err != nil {
		o.harness(err)
		return
	}
	t0 := time.Now()
	if waitPodGone(ctx, env, pod, 90*time.Second, o) {
		o.time("manifest removed → pod directory gone", time.Since(t0))
		o.observe("nothing left")
	}
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

func expectWrapped(flavor) string {
	return "downwardAPI files right, a tmpfs; nothing left"
}

// wrappedScenario: a downwardAPI volume wraps an emptyDir (a Memory one,
// set up through NewWrapperMounter, torn down through
// UnmountViaEmptyDir); its files are right and its teardown leaves
// nothing.
//
// A projected volume cannot be shown here: the projected plugin refuses
// every SetUp without a kube client ("cannot setup projected volume …
// because kube client is not configured"), even for downwardAPI sources,
// and a standalone kubelet has none. Static pods cannot reference secrets
// or configMaps either. Those need the one-node control plane the
// reference harness describes.
func wrappedScenario(ctx context.Context, env *scenarioEnv, o *outcome) {
	pod := busyboxPod(env.podName, env.uid, "cat /podinfo/name /podinfo/meta/uid > /dev/null",
		[]corev1.VolumeMount{{Name: "podinfo", MountPath: "/podinfo"}},
		[]corev1.Volume{
			{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "meta/uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
				{Path: "meta/namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
			}}}},
		})
	if !startPod(ctx, env, pod, o) {
		return
	}
	k := env.kubelet
	downward := k.volumeDir(pod, "kubernetes.io~downward-api", "podinfo")
	files := []struct{ path, want string }{
		{filepath.Join(downward, "name"), pod.Name + "-" + nodeName},
		{filepath.Join(downward, "labels"), fmt.Sprintf("app=%q", pod.Name)},
		{filepath.Join(downward, "meta/uid"), env.uid},
		{filepath.Join(downward, "meta/namespace"), pod.Namespace},
	}
	right := 0
	for _, f := range files {
		got, _ := readFileOr(f.path)
		if o.want(got == f.want, "%s = %q; want %q", strings.TrimPrefix(f.path, k.podDir(pod)+"/"), got, f.want) {
			right++
		}
	}
	o.observe("%d/%d files right", right, len(files))
	for _, dir := range []string{downward} {
		m, err := mountAt(dir)
		if err != nil {
			o.harness(err)
			return
		}
		if o.want(m != nil, "no mount on %s", dir) {
			if o.want(m.FSType == "tmpfs", "%s is %s, not tmpfs", dir, m.FSType) {
				o.observe("tmpfs")
			}
			o.fact("volume mount: %s %s, source %s", m.FSType, m.Mountpoint, m.Source)
		}
	}
	removeAndWaitGone(ctx, env, pod, o)
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

	offset, err := k.logSize()
	if err != nil {
		o.harness(err)
		return
	}
	if err := k.removePod(pod); err != nil {
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
