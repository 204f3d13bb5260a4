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
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// csiScenarioName is the CSI scenario's name (its id is "<num>-csi").
const csiScenarioName = "csi"

// csiInputs is what the driver hands the namespace for the CSI scenario:
// the imported image of nodevol-csi and deploy/csi's objects.
type csiInputs struct {
	Image     nodevolImage  `json:"image"`
	Manifests *csiManifests `json:"manifests"`
}

// prepareCSI reads deploy/csi and the nodevol-csi image (building it with
// the root module's hack/image when no -csi-image is given), when the CSI
// scenario is selected; nil otherwise.
func prepareCSI(ctx context.Context, opts options, dir string, log *logger) (*csiInputs, error) {
	if on, err := scenarioSelected(opts.run, csiScenarioName); !on || err != nil {
		return nil, err
	}
	m, err := readCSIManifests(opts.csiDeploy)
	if err != nil {
		return nil, err
	}
	if len(m.DaemonSet.Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("%w: the DaemonSet has no container", ErrUnfitCSIManifests)
	}
	want := m.DaemonSet.Spec.Template.Spec.Containers[0].Image
	img, err := imageOf(ctx, opts.csiImage, dir, "nodevol-csi", want, log)
	if err != nil {
		return nil, err
	}
	if img.Name != want {
		return nil, fmt.Errorf("%w: the image %s is named %s; the DaemonSet runs %s", ErrUnfitCSIManifests, img.Tar, img.Name, want)
	}
	log.Printf("csi: CSIDriver %s and DaemonSet %s/%s from %s, image %s (%s)", m.Driver.Name, m.DaemonSet.Namespace, m.DaemonSet.Name, m.Src, img.Name, img.Digest)
	return &csiInputs{Image: img, Manifests: m}, nil
}

func expectCSI(flavor) string {
	return "driver registered; Default+Memory volumes written by the pod; NAS sentinel intact across a driver restart; refusal names mount; ≥2 tries; gone after umount"
}

// csiScenario is nodevol-csi's end-to-end case, on the stock kubelet: deploy/csi
// as a cluster runs it, a pod with a Default and a Memory inline volume of
// nodevol-csi, a tmpfs "NAS" mounted inside the Default volume from the
// node, the driver restarted while the pod runs, then the pod deleted. The
// kubelet's NodeUnpublishVolume must be refused (naming the NAS, retried
// with backoff) while the NAS is there and keep every byte of it, and the
// volume must go once it is unmounted. Row 1 on the same kubelet is the
// peer: a stock emptyDir with the same NAS loses it.
func csiScenario(ctx context.Context, env *scenarioEnv, o *outcome) {
	in := env.csi
	if in == nil {
		o.harness(errors.New("the CSI scenario's inputs were not prepared"))
		return
	}
	k, api, m := env.kubelet, env.api, in.Manifests
	driverName := m.Driver.Name

	// The cluster-wide objects, as `kubectl apply -f deploy/csi/` makes them.
	for _, obj := range []struct {
		path string
		v    any
	}{
		{"/api/v1/namespaces", m.Namespace},
		{"/api/v1/namespaces/" + m.ServiceAccount.Namespace + "/serviceaccounts", m.ServiceAccount},
		{"/apis/storage.k8s.io/v1/csidrivers", m.Driver},
	} {
		if err := api.do(ctx, http.MethodPost, obj.path, obj.v, nil); err != nil && !errors.Is(err, ErrExists) {
			o.harness(err)
			return
		}
	}
	defer func() {
		_ = api.do(context.Background(), http.MethodDelete, "/apis/storage.k8s.io/v1/csidrivers/"+driverName, nil, nil)
	}()

	driverPod, err := csiDriverPod(m.DaemonSet, k.root)
	if err != nil {
		o.harness(err)
		return
	}
	driver := &apiPodRun{api: api, pod: driverPod}
	defer driver.stop(context.Background(), 30*time.Second)
	t0 := time.Now()
	if !driver.startReady(ctx, 90*time.Second, o) {
		o.fact("kubelet errors: %s", k.lastErrors())
		return
	}
	if !o.want(waitCSINode(ctx, api, driverName, true) == nil, "the kubelet did not register %s (CSINode)", driverName) {
		return
	}
	o.time("driver pod created → ready and registered", time.Since(t0))
	o.observe("driver registered")

	// The pod: a Default and a Memory inline volume, each written to by
	// its container.
	csiVol := func(name string, attrs map[string]string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: driverName, VolumeAttributes: attrs}}}
	}
	app := busyboxPod(env.podName, "", "echo "+fromPodText+" > /data/from-pod && echo "+fromPodText+" > /mem/from-pod",
		[]corev1.VolumeMount{{Name: scratchVolume, MountPath: "/data"}, {Name: "mem", MountPath: "/mem"}},
		[]corev1.Volume{csiVol(scratchVolume, map[string]string{"medium": "Default", "sizeLimit": "64Mi"}), csiVol("mem", map[string]string{"medium": "Memory", "sizeLimit": "16Mi"})})
	app.Spec.NodeName = nodeName
	noToken := false
	app.Spec.AutomountServiceAccountToken = &noToken
	appRun := &apiPodRun{api: api, pod: app}
	defer appRun.stop(context.Background(), 30*time.Second)
	t0 = time.Now()
	if !appRun.startRunning(ctx, 90*time.Second, o) {
		o.fact("kubelet errors: %s", k.lastErrors())
		return
	}
	o.time("pod created → running", time.Since(t0))
	uid := string(appRun.created.UID)
	volDir := func(name string) string {
		return filepath.Join(k.root, "pods", uid, "volumes", "kubernetes.io~csi", name, "mount")
	}
	scratch, mem := volDir(scratchVolume), volDir("mem")
	wrote := true
	for _, dir := range []string{scratch, mem} {
		err := poll(ctx, 10*time.Second, func() (bool, error) {
			b, err := os.ReadFile(filepath.Join(dir, "from-pod"))
			return err == nil && string(b) == fromPodText+"\n", nil
		})
		wrote = o.want(err == nil, "the container's file is not in %s: %v", dir, err) && wrote
	}
	memMount, err := mountAt(mem)
	switch {
	case err != nil:
		o.harness(err)
	case o.want(memMount != nil && memMount.FSType == "tmpfs" && strings.Contains(memMount.VFSOptions, "size=16384k"),
		"the Memory volume %s is not a 16 MiB tmpfs: %+v", mem, memMount):
		o.fact("Memory volume: %s %s (%s)", memMount.FSType, memMount.Source, memMount.VFSOptions)
	}
	if m, _ := mountAt(scratch); !o.want(m == nil, "something is mounted on the Default volume %s: %+v", scratch, m) {
		return
	}
	if wrote {
		o.observe("Default+Memory written by the pod")
	}

	// The NAS, mounted from the node inside the Default volume.
	sentinel := make([]byte, sentinelSize)
	_, _ = rand.Read(sentinel)
	nas := filepath.Join(scratch, "nas")
	if err := mountNAS(nasTmpfs, nas, "", sentinel); err != nil {
		o.harness(err)
		return
	}
	mounted := true
	defer func() {
		if mounted {
			_ = unix.Unmount(nas, unix.MNT_DETACH)
		}
	}()

	// The driver restarts mid-life (a rollout, a crash): the new process
	// knows the volumes only from what the old one recorded on disk.
	t0 = time.Now()
	if !driver.stop(ctx, 60*time.Second) || !o.want(waitCSINode(ctx, api, driverName, false) == nil, "the kubelet kept %s registered after its pod went", driverName) {
		return
	}
	if !driver.startReady(ctx, 90*time.Second, o) || !o.want(waitCSINode(ctx, api, driverName, true) == nil, "the restarted driver did not register") {
		return
	}
	o.time("driver restarted (deleted → ready again)", time.Since(t0))
	o.observe("driver restarted")

	offset, err := k.logSize()
	if err != nil {
		o.harness(err)
		return
	}
	if err := api.deletePod(ctx, app); err != nil {
		o.harness(err)
		return
	}
	t0 = time.Now()
	attempts := teardownAttempts{re: csiTeardownLine(uid, scratchVolume)}
	err = poll(ctx, 90*time.Second, func() (bool, error) {
		return attempts.failures() >= 2, errors.Join(attempts.read(k, offset), k.alive())
	})
	if !o.want(err == nil, "want ≥2 failed TearDowns of the Default volume in the kubelet's log, saw %d: %v", attempts.failures(), err) {
		o.fact("kubelet log lines: %s", strings.Join(attempts.lines, " | "))
	}
	o.time("pod deleted → second refused TearDown", time.Since(t0))
	left, ok := readFileOr(filepath.Join(nas, "SENTINEL"))
	if o.want(ok && bytes.Equal([]byte(left), sentinel), "the NAS's sentinel is %s", map[bool]string{true: "changed", false: "gone"}[ok]) {
		o.observe("sentinel intact")
		o.fact("sentinel intact: %d bytes, sha256 %x", len(sentinel), sha256.Sum256(sentinel))
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "from-pod")); !o.want(err == nil && string(b) == fromPodText+"\n", "the Default volume's own file was touched while the teardown was refused: %v", err) {
		return
	}
	if o.want(attempts.everyFailureRefuses(nas), "not every TearDown failure is the refusal (\"emptyDir teardown of … refused\") naming the NAS %s", nas) {
		o.observe("refusal names mount")
	}
	if first := attempts.firstFailure(k.root); first != "" {
		o.fact("first TearDown error: %s", first)
	}
	d := attempts.delays()
	o.observe("%d failed tries, delays %s", attempts.failures(), strings.Join(d, ", "))
	o.want(delaysGrow(d), "retry delays do not grow: %s", strings.Join(d, ", "))
	memLeft, err := mountAt(mem)
	o.want(err == nil && memLeft == nil, "the Memory volume is still mounted while only the Default one is refused: %+v %v", memLeft, err)

	if err := unix.Unmount(nas, 0); err != nil {
		o.harness(&os.PathError{Op: "umount", Path: nas, Err: err})
		return
	}
	mounted = false
	t1 := time.Now()
	if waitPodGone(ctx, env, appRun.created, 90*time.Second, o) {
		o.observe("gone after umount")
		o.time("NAS unmounted → pod directory gone", time.Since(t1))
		_ = attempts.read(k, offset)
		o.want(attempts.succeeded(), "the pod directory went, but no \"TearDown succeeded\" for the volume in the kubelet's log")
	}
	err = poll(ctx, 30*time.Second, func() (bool, error) {
		_, err := api.apiPod(ctx, app.Namespace, app.Name)
		return errors.Is(err, ErrNotFound), nil
	})
	o.want(err == nil, "the pod object was not removed from the API server after its volumes went: %v", err)
}

// csiTeardownLine matches the kubelet's log lines about a TearDown of the
// pod's inline volume vol, by the unique volume name the kubelet gives an
// inline CSI volume: kubernetes.io/csi/<pod UID>-<volume>.
func csiTeardownLine(uid, vol string) *regexp.Regexp {
	return regexp.MustCompile(`UnmountVolume\.TearDown (failed|succeeded) for volume "kubernetes\.io/csi/` + regexp.QuoteMeta(uid+"-"+vol) + `"`)
}

// waitCSINode waits until the node's CSINode lists the driver (want) or
// no longer does.
func waitCSINode(ctx context.Context, api *controlPlane, driver string, want bool) error {
	return poll(ctx, 60*time.Second, func() (bool, error) {
		var n storagev1.CSINode
		err := api.get(ctx, "/apis/storage.k8s.io/v1/csinodes/"+nodeName, &n)
		if errors.Is(err, ErrNotFound) {
			return !want, nil
		}
		if err != nil {
			return false, err
		}
		listed := slices.ContainsFunc(n.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver })
		return listed == want, nil
	})
}

// apiPodRun is one pod created through the API server, as a controller
// would create it.
type apiPodRun struct {
	api     *controlPlane
	pod     *corev1.Pod
	created *corev1.Pod
}

// startReady creates the pod and waits until it is Ready.
func (r *apiPodRun) startReady(ctx context.Context, limit time.Duration, o *outcome) bool {
	return r.start(ctx, limit, o, "ready", func(p *corev1.Pod) bool {
		return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		})
	})
}

// startRunning creates the pod and waits until it runs.
func (r *apiPodRun) startRunning(ctx context.Context, limit time.Duration, o *outcome) bool {
	return r.start(ctx, limit, o, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
}

func (r *apiPodRun) start(ctx context.Context, limit time.Duration, o *outcome, what string, ok func(*corev1.Pod) bool) bool {
	created, err := r.api.createPod(ctx, r.pod)
	if err != nil {
		o.harness(fmt.Errorf("creating pod %s/%s: %w", r.pod.Namespace, r.pod.Name, err))
		return false
	}
	r.created = created
	var last *corev1.Pod
	err = poll(ctx, limit, func() (bool, error) {
		p, err := r.api.apiPod(ctx, created.Namespace, created.Name)
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		status := "never seen"
		if last != nil {
			status = fmt.Sprintf("phase %s, conditions %+v, container statuses %+v", last.Status.Phase, last.Status.Conditions, last.Status.ContainerStatuses)
		}
		o.harness(fmt.Errorf("pod %s/%s not %s: %w (%s)", created.Namespace, created.Name, what, err, status))
		return false
	}
	return true
}

// stop deletes the pod and waits until the API server no longer has it
// (the kubelet stopped it and released its volumes); false when it could
// not.
func (r *apiPodRun) stop(ctx context.Context, limit time.Duration) bool {
	if r.created == nil {
		return true
	}
	if err := r.api.deletePod(ctx, r.created); err != nil && !errors.Is(err, ErrNotFound) {
		return false
	}
	err := poll(ctx, limit, func() (bool, error) {
		_, err := r.api.apiPod(ctx, r.created.Namespace, r.created.Name)
		return errors.Is(err, ErrNotFound), nil
	})
	if err == nil {
		r.created = nil
	}
	return err == nil
}
