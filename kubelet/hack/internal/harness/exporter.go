package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// exporterScenarioName is the exporter scenario's name (its id is
// "<num>-exporter").
const exporterScenarioName = "exporter"

// exporterControlName is the control scenario's name: the same DaemonSet
// with the kubelet root's propagation taken away.
const exporterControlName = "exporter-no-propagation"

// exporterInputs is what the driver hands the namespace for the exporter
// scenario: the imported image and the DaemonSet, already read.
type exporterInputs struct {
	Image        nodevolImage      `json:"image"`
	DaemonSet    *appsv1.DaemonSet `json:"daemonSet"`
	DaemonSetSrc string            `json:"daemonSetSrc"` // the manifest file it came from
}

// prepareExporter reads the DaemonSet and the image (building it when no
// -nodevol-image is given), when the exporter scenario is selected; nil
// otherwise.
func prepareExporter(ctx context.Context, opts options, dir string, log *logger) (*exporterInputs, error) {
	if on, err := scenarioSelected(opts.run, exporterScenarioName, exporterControlName); !on || err != nil {
		return nil, err
	}
	deploy := opts.deploy
	if deploy == "" {
		deploy = "../deploy"
	}
	ds, src, err := readDaemonSet(deploy)
	if err != nil {
		return nil, err
	}
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("%w: %s/%s has no container", ErrUnfitDaemonSet, ds.Namespace, ds.Name)
	}
	img, err := imageOf(ctx, opts.nodevolImage, dir, "nodevol", ds.Spec.Template.Spec.Containers[0].Image, log)
	if err != nil {
		return nil, err
	}
	log.Printf("exporter: DaemonSet %s/%s from %s, image %s (%s)", ds.Namespace, ds.Name, src, img.Name, img.Digest)
	return &exporterInputs{Image: img, DaemonSet: ds, DaemonSetSrc: src}, nil
}

func expectExporter(flavor) string {
	return "ready, foreign mount namespace, host mounts visible, kubelet root ro+slave, security context applied; danger 1 within one interval of the NAS mount, 0 within one of its unmount; nothing written; nothing left"
}

// exporterScenario runs deploy/'s DaemonSet as a static pod (run, not
// just parsed): nodevol serve in a container, the kubelet root
// mounted read-only with HostToContainer propagation. A second pod has a
// Default emptyDir; the driver mounts a tmpfs "NAS" inside it from the
// kubelet's mount namespace (the container sees it only through
// propagation), and /metrics must report one dangerous volume within one
// scan interval, and none within one interval of the NAS's unmount. The
// exporter must not have changed anything: the emptyDir's files and the
// NAS's sentinel stay as they were.
func exporterScenario(ctx context.Context, env *scenarioEnv, o *outcome) {
	k := env.kubelet
	ex, ok := exporterStaticPod(ctx, env, "8001", o)
	if !ok {
		return
	}
	// The second pod, with a Default emptyDir, runs before the exporter
	// starts: the emptyDir's state is taken before the exporter could touch
	// it, and the exporter's first scan already lists the volume.
	app, vol, nas, ok := scratchPodWithMountPoint(ctx, env, o)
	if !ok {
		return
	}
	before, err := treeState(vol)
	if err != nil {
		o.harness(err)
		return
	}

	run, ok := startExporter(ctx, env, ex, o)
	defer run.cleanup()
	if !ok {
		return
	}

	// The API server admitted the DaemonSet's pod too, as the static pod's
	// mirror (its priority class, security context and probes included).
	var mirror *corev1.Pod
	err = poll(ctx, 30*time.Second, func() (bool, error) {
		mirror, err = env.api.mirrorPod(ctx, ex.pod)
		return err == nil, nil
	})
	if o.want(err == nil, "no mirror pod of the exporter in the API server: %v", err) {
		o.fact("mirror pod %s/%s, uid %s, priority class %q", mirror.Namespace, mirror.Name, mirror.UID, mirror.Spec.PriorityClassName)
	}

	m, err := run.scrape(ctx)
	if err != nil {
		o.harness(err)
		return
	}
	rootLabel := map[string]string{"root": ex.hostRoot}
	if o.want(m.value("nodevol_mount_namespace", map[string]string{"state": "foreign"}) == 1,
		"nodevol_mount_namespace{state=\"foreign\"} is not 1: %s", m.series("nodevol_mount_namespace")) {
		o.observe("foreign mount namespace")
	}
	// serve's own evidence that the host's later mounts reach it: the
	// root's propagation (a slave of the host's mount), as a metric and a
	// log line at start, and no warning that they may be missed.
	visible := m.count("nodevol_host_mounts_visible", rootLabel) == 1 && m.value("nodevol_host_mounts_visible", rootLabel) == 1
	var seenLine string
	_ = poll(ctx, 5*time.Second, func() (bool, error) {
		seenLine = exporterLogLine(k, ex.pod, "mounts made on the host under the kubelet root are seen here")
		return seenLine != "", nil
	})
	warning := exporterLogLine(k, ex.pod, "WARNING")
	o.want(visible, "want nodevol_host_mounts_visible{root=%q} 1; have %s", ex.hostRoot, m.series("nodevol_host_mounts_visible"))
	o.want(seenLine != "", "the exporter's log does not say that the host's mounts under the kubelet root are seen")
	o.want(warning == "", "the exporter logged a warning: %s", warning)
	if visible && seenLine != "" && warning == "" {
		o.observe("host mounts visible")
		o.fact("exporter log at start: %s", strings.ReplaceAll(seenLine, k.root, "$ROOT"))
	}
	o.fact("exporter metrics at start: %s; %s; %s", m.series("nodevol_mount_namespace"), m.series("nodevol_host_mounts_visible"), m.series("nodevol_build_info"))
	o.want(m.count("nodevol_scan_danger_volumes", rootLabel) == 1 && m.value("nodevol_scan_danger_volumes", rootLabel) == 0,
		"before any NAS: want nodevol_scan_danger_volumes{root=%q} 0; have %s", ex.hostRoot, m.series("nodevol_scan_danger_volumes"))
	checkExporterProcess(ex, o)

	// The exporter's first scan (before /readyz said 200) listed the pod's
	// volume, healthy.
	emptyDirOK := map[string]string{"root": ex.hostRoot, "plugin": "kubernetes.io/empty-dir"}
	m, err = run.scrapeUntil(ctx, 2*ex.interval, func(m metrics) bool {
		return m.value("nodevol_scan_volumes", emptyDirOK) >= 1
	})
	if !o.want(err == nil, "the exporter never listed the pod's emptyDir in nodevol_scan_volumes: %v", err) {
		return
	}
	o.fact("with the pod, before the NAS: %s; %s", m.series("nodevol_scan_volumes"), m.series("nodevol_scan_danger_volumes"))
	o.want(m.value("nodevol_scan_danger_volumes", rootLabel) == 0, "with the pod, before the NAS: danger volumes %s; want 0", m.series("nodevol_scan_danger_volumes"))

	// The NAS, mounted from the kubelet's (the host's) mount namespace.
	sentinel := make([]byte, sentinelSize)
	_, _ = rand.Read(sentinel)
	theNAS, ok := mountExporterNAS(nas, o)
	if !ok {
		return
	}
	defer theNAS.cleanup()
	t1 := time.Now()
	if err := os.WriteFile(filepath.Join(nas, "SENTINEL"), sentinel, 0o644); err != nil {
		o.harness(err)
		return
	}
	nasMount, err := mountAt(nas)
	if err != nil || nasMount == nil {
		o.harness(fmt.Errorf("the NAS mount at %s is not in the mount table: %v", nas, err))
		return
	}
	inContainer := filepath.Join(ex.root, strings.TrimPrefix(nas, k.root))
	var seenInContainer time.Duration
	danger := map[string]string{"root": ex.hostRoot, "plugin": "kubernetes.io/empty-dir", "verdict": "danger", "reason": "nested-mount"}
	m, err = run.scrapeUntil(ctx, 3*ex.interval, func(m metrics) bool {
		if seenInContainer == 0 && mountedIn(ex, inContainer) {
			seenInContainer = time.Since(t1)
		}
		return m.value("nodevol_scan_danger_volumes", rootLabel) == 1
	})
	detect := time.Since(t1)
	if !o.want(err == nil, "nodevol_scan_danger_volumes never became 1 after the NAS was mounted: %v (last: %s)", err, m.series("nodevol_scan_danger_volumes")) {
		return
	}
	o.time("NAS mounted → danger 1 on /metrics", detect)
	if seenInContainer > 0 {
		o.time("NAS mounted → in the exporter's mount table (propagation)", seenInContainer)
	}
	o.want(detect <= ex.interval, "danger reported %v after the NAS was mounted; want within one scan interval (%v)", detect.Round(time.Millisecond), ex.interval)
	o.want(m.value("nodevol_scan_volumes", danger) == 1, "the danger series does not name the emptyDir and nested-mount: %s", m.series("nodevol_scan_volumes"))
	o.fact("with the NAS: %s; %s", m.series("nodevol_scan_volumes"), m.series("nodevol_scan_nested_mounts"))
	o.observe("danger 1 after %.2fs", detect.Seconds())
	// Its log names the volume by its host path.
	var logged string
	_ = poll(ctx, 5*time.Second, func() (bool, error) {
		logged = exporterLogLine(k, ex.pod, "volume is not healthy", "nested-mount", vol)
		return logged != "", nil
	})
	if o.want(logged != "", "the exporter's log has no \"volume is not healthy\" line with nested-mount and %s", vol) {
		o.fact("exporter log: %s", strings.ReplaceAll(logged, k.root, "$ROOT"))
	}

	// Nothing was unmounted or written: the NAS is the same mount, its
	// sentinel the same bytes.
	still, err := mountAt(nas)
	o.want(err == nil && still != nil && still.ID == nasMount.ID, "the NAS mount (id %d) is no longer at %s: %v", nasMount.ID, nas, err)
	left, ok := readFileOr(filepath.Join(nas, "SENTINEL"))
	o.want(ok && left == string(sentinel), "the NAS's sentinel is not intact")

	if !theNAS.unmount(o) {
		return
	}
	t2 := time.Now()
	m, err = run.scrapeUntil(ctx, 3*ex.interval, func(m metrics) bool {
		return m.value("nodevol_scan_danger_volumes", rootLabel) == 0
	})
	cleared := time.Since(t2)
	if !o.want(err == nil, "nodevol_scan_danger_volumes never went back to 0 after the NAS's unmount: %v (last: %s)", err, m.series("nodevol_scan_danger_volumes")) {
		return
	}
	o.time("NAS unmounted → danger 0 on /metrics", cleared)
	o.want(cleared <= ex.interval, "danger cleared %v after the unmount; want within one scan interval (%v)", cleared.Round(time.Millisecond), ex.interval)
	o.observe("0 after %.2fs", cleared.Seconds())

	after, err := treeState(vol)
	if err != nil {
		o.harness(err)
		return
	}
	ents, _ := os.ReadDir(nas)
	if o.want(maps.Equal(before, after) && len(ents) == 0, "the emptyDir changed while the exporter ran: before %v, after %v (nas/ holds %d entries)", before, after, len(ents)) {
		o.observe("nothing written")
	}

	if !run.stop(ctx, env, app, o) {
		return
	}
	err = poll(ctx, 30*time.Second, func() (bool, error) {
		_, err := env.api.mirrorPod(ctx, ex.pod)
		return errors.Is(err, ErrNotFound), nil
	})
	o.want(err == nil, "the exporter's mirror pod is still in the API server: %v", err)
}

func expectExporterControl(flavor) string {
	return "host mounts not visible (metric 0, warning); a scan after the NAS mount misses it: danger 0; nothing left"
}

// exporterControlScenario is scenario 7's control: the same DaemonSet,
// but the kubelet root mounted with mountPropagation None. The exporter
// must say that it may miss the host's mounts (nodevol_host_mounts_visible
// 0 and a warning), and it does: the NAS never reaches its mount
// namespace, and a scan that starts after the NAS was mounted reports no
// danger. This is what makes scenario 7's pass mean something: it rests
// on the DaemonSet's HostToContainer, which staticExporterPod requires.
func exporterControlScenario(ctx context.Context, env *scenarioEnv, o *outcome) {
	k := env.kubelet
	ex, ok := exporterStaticPod(ctx, env, "8002", o)
	if !ok {
		return
	}
	if err := ex.setRootPropagation(corev1.MountPropagationNone); err != nil {
		o.harness(err)
		return
	}
	app, _, nas, ok := scratchPodWithMountPoint(ctx, env, o)
	if !ok {
		return
	}
	run, ok := startExporter(ctx, env, ex, o)
	defer run.cleanup()
	if !ok {
		return
	}
	m, err := run.scrape(ctx)
	if err != nil {
		o.harness(err)
		return
	}
	rootLabel := map[string]string{"root": ex.hostRoot}
	notVisible := m.count("nodevol_host_mounts_visible", rootLabel) == 1 && m.value("nodevol_host_mounts_visible", rootLabel) == 0
	o.want(notVisible, "want nodevol_host_mounts_visible{root=%q} 0 with a private root; have %s", ex.hostRoot, m.series("nodevol_host_mounts_visible"))
	var warning string
	_ = poll(ctx, 5*time.Second, func() (bool, error) {
		warning = exporterLogLine(k, ex.pod, "WARNING: mounts made on the host under the kubelet root may not be seen here")
		return warning != "", nil
	})
	if o.want(warning != "", "the exporter did not warn that the host's mounts may not be seen") && notVisible {
		o.observe("host mounts not visible (metric 0, warning)")
		o.fact("exporter warning: %s", strings.ReplaceAll(warning, k.root, "$ROOT"))
	}

	theNAS, ok := mountExporterNAS(nas, o)
	if !ok {
		return
	}
	defer theNAS.cleanup()
	t1 := time.Now()
	// A successful scan that started after the mount: with the root
	// private, nothing in the container's mount table changed, so this is
	// the interval's scan.
	since := float64(t1.UnixNano()) / 1e9
	m, err = run.scrapeUntil(ctx, 3*ex.interval, func(m metrics) bool {
		return m.value("nodevol_last_successful_scan_timestamp_seconds", rootLabel) >= since
	})
	if !o.want(err == nil, "no successful scan started after the NAS was mounted: %v", err) {
		return
	}
	o.time("NAS mounted → a scan that started after it done", time.Since(t1))
	missed := m.value("nodevol_scan_danger_volumes", rootLabel) == 0
	inContainer := filepath.Join(ex.root, strings.TrimPrefix(nas, k.root))
	reached := mountedIn(ex, inContainer)
	o.want(missed, "the exporter with a private root reported the NAS: %s", m.series("nodevol_scan_danger_volumes"))
	o.want(!reached, "the NAS reached the exporter's mount table without propagation")
	if missed && !reached {
		o.observe("a scan %.1fs after the NAS mount misses it: danger 0", time.Since(t1).Seconds())
	}
	if !theNAS.unmount(o) {
		return
	}
	run.stop(ctx, env, app, o)
}

// exporterRun is a started exporter static pod, removed by cleanup unless
// stop removed it.
type exporterRun struct {
	ex     *staticExporter
	k      *kubelet
	client *http.Client
	up     bool
}

// scrape reads the exporter's /metrics.
func (r *exporterRun) scrape(ctx context.Context) (metrics, error) {
	return scrape(ctx, r.client, r.ex.metricsURL)
}

// scrapeUntil scrapes the exporter's /metrics until cond holds of them,
// for up to within: the last metrics it read, and poll's error.
func (r *exporterRun) scrapeUntil(ctx context.Context, within time.Duration, cond func(metrics) bool) (metrics, error) {
	var last metrics
	err := poll(ctx, within, func() (bool, error) {
		m, err := r.scrape(ctx)
		if err != nil {
			return false, nil
		}
		last = m
		return cond(m), nil
	})
	return last, err
}

func (r *exporterRun) cleanup() {
	if r.up {
		_, _ = r.k.removePod(r.ex.pod)
	}
}

// stop removes the scenario's app pod, then the exporter, and waits for
// both to be gone.
func (r *exporterRun) stop(ctx context.Context, env *scenarioEnv, app *corev1.Pod, o *outcome) bool {
	if _, ok := removeAndWaitGone(ctx, env, app, o); !ok {
		return false
	}
	if _, err := r.k.removePod(r.ex.pod); err != nil {
		o.harness(err)
		return false
	}
	r.up = false
	return waitPodGone(ctx, env, r.ex.pod, 90*time.Second, o)
}

// exporterNAS is the scenarios' "NAS", a tmpfs mounted from the driver's
// (the host's) mount namespace; cleanup detaches it unless unmount did.
type exporterNAS struct {
	path    string
	mounted bool
}

func mountExporterNAS(path string, o *outcome) (*exporterNAS, bool) {
	if err := unix.Mount("e2e-nas", path, "tmpfs", 0, "size=4m"); err != nil {
		o.harness(&os.PathError{Op: "mount tmpfs", Path: path, Err: err})
		return nil, false
	}
	return &exporterNAS{path: path, mounted: true}, true
}

func (n *exporterNAS) unmount(o *outcome) bool {
	if err := unix.Unmount(n.path, 0); err != nil {
		o.harness(&os.PathError{Op: "umount", Path: n.path, Err: err})
		return false
	}
	n.mounted = false
	return true
}

func (n *exporterNAS) cleanup() {
	if n.mounted {
		_ = unix.Unmount(n.path, unix.MNT_DETACH)
	}
}

// exporterStaticPod converts the prepared DaemonSet into the static pod
// for env's kubelet, its UID's fourth group uidGroup, and makes sure its
// namespace exists in the API server (for the mirror pod).
func exporterStaticPod(ctx context.Context, env *scenarioEnv, uidGroup string, o *outcome) (*staticExporter, bool) {
	if env.exporter == nil {
		o.harness(fmt.Errorf("no exporter image or DaemonSet was prepared"))
		return nil, false
	}
	ex, err := staticExporterPod(env.exporter.DaemonSet, staticExporterOptions{
		uid:         types.UID("0de0e2e0-0000-4000-" + uidGroup + "-" + env.uid[len(env.uid)-12:]),
		image:       env.exporter.Image.Name,
		kubeletRoot: env.kubelet.root,
	})
	if err != nil {
		o.harness(err)
		return nil, false
	}
	same := "the DaemonSet's own reference"
	if ref := env.exporter.DaemonSet.Spec.Template.Spec.Containers[0].Image; ref != env.exporter.Image.Name {
		same = "in place of the DaemonSet's " + ref
	}
	o.fact("static pod from DaemonSet %s/%s (%s), image %s %s (%s); args %q", env.exporter.DaemonSet.Namespace, env.exporter.DaemonSet.Name,
		filepath.Base(env.exporter.DaemonSetSrc), env.exporter.Image.Name, env.exporter.Image.Digest, same, ex.pod.Spec.Containers[0].Args)
	if err := env.api.ensureNamespace(ctx, ex.pod.Namespace); err != nil {
		o.harness(err)
		return nil, false
	}
	return ex, true
}

// scratchPodWithMountPoint starts the scenario's pod with a Default
// emptyDir, waits for the file its container writes, adds one of the
// driver's, and makes the NAS's mount point (before any state of the
// volume is taken: making it changes the volume directory's mtime).
func scratchPodWithMountPoint(ctx context.Context, env *scenarioEnv, o *outcome) (app *corev1.Pod, vol, nas string, ok bool) {
	app = busyboxPod(env.podName, env.uid, "echo "+fromPodText+" > /data/from-pod",
		[]corev1.VolumeMount{{Name: scratchVolume, MountPath: "/data"}},
		[]corev1.Volume{{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}})
	if !startPod(ctx, env, app, o) {
		return nil, "", "", false
	}
	vol = env.kubelet.volumeDir(app, emptyDirDir, scratchVolume)
	if err := poll(ctx, 10*time.Second, func() (bool, error) { _, err := os.Stat(filepath.Join(vol, "from-pod")); return err == nil, nil }); err != nil {
		o.harness(fmt.Errorf("the container did not write from-pod: %w", err))
		return nil, "", "", false
	}
	own := make([]byte, 4096)
	_, _ = rand.Read(own)
	if err := os.WriteFile(filepath.Join(vol, "own-file"), own, 0o644); err != nil {
		o.harness(err)
		return nil, "", "", false
	}
	nas = filepath.Join(vol, "nas")
	if err := os.Mkdir(nas, 0o755); err != nil {
		o.harness(err)
		return nil, "", "", false
	}
	return app, vol, nas, true
}

// startExporter writes the exporter's manifest and waits until its
// readiness probe's URL answers 200 (its first scan is done). The run it
// returns, ready or not, removes the static pod on cleanup.
func startExporter(ctx context.Context, env *scenarioEnv, ex *staticExporter, o *outcome) (*exporterRun, bool) {
	k := env.kubelet
	run := &exporterRun{ex: ex, k: k, client: &http.Client{Timeout: 2 * time.Second}, up: true}
	t0 := time.Now()
	if err := k.addPod(ex.pod); err != nil {
		o.harness(err)
		return run, false
	}
	if err := k.waitRunning(ctx, ex.pod); err != nil {
		o.harness(err)
		return run, false
	}
	err := poll(ctx, 3*ex.interval, func() (bool, error) {
		code, _ := httpStatus(ctx, run.client, ex.readyURL)
		return code == http.StatusOK, k.alive()
	})
	if !o.want(err == nil, "the exporter's %s never answered 200: %v", ex.readyURL, err) {
		return run, false
	}
	o.time("exporter manifest written → /readyz 200", time.Since(t0))
	o.observe("ready in %.1fs", time.Since(t0).Seconds())
	return run, true
}

// checkExporterProcess looks at the exporter's process from outside: the
// kubelet root is mounted read-only and as a slave of the host's mount
// (HostToContainer), the root filesystem is read-only if the container
// asks for it, and its capability sets are the DaemonSet's.
func checkExporterProcess(ex *staticExporter, o *outcome) {
	pid, err := exporterPID()
	if err != nil {
		o.harness(err)
		return
	}
	ms, err := processMounts(pid)
	if err != nil {
		o.harness(err)
		return
	}
	var rootMount, slash *mountinfo.Info
	for _, m := range ms {
		switch m.Mountpoint {
		case filepath.Clean(ex.root):
			rootMount = m
		case "/":
			slash = m
		}
	}
	if o.want(rootMount != nil, "the exporter (pid %d) has no mount at %s", pid, ex.root) {
		ro := slices.Contains(strings.Split(rootMount.Options, ","), "ro")
		slave := strings.Contains(rootMount.Optional, "master:")
		o.want(ro, "the kubelet root in the exporter is mounted %q, not ro", rootMount.Options)
		o.want(slave, "the kubelet root in the exporter has propagation %q, not a slave (master:N) of the host's", rootMount.Optional)
		if ro && slave {
			o.observe("kubelet root ro+slave")
		}
		o.fact("exporter pid %d: %s mounted %s, propagation %q", pid, rootMount.Mountpoint, rootMount.Options, rootMount.Optional)
	}
	if slash != nil {
		o.fact("exporter's / mounted %s", slash.Options)
	}
	ok := true
	if err := checkRootFS(ex.pod, slash); err != nil {
		ok = o.want(false, "%v", err)
	}
	want, err := wantedStatus(ex.pod)
	if err != nil {
		o.harness(err)
		return
	}
	have, err := processStatus(pid)
	if err != nil {
		o.harness(err)
		return
	}
	var got []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got = append(got, k+" "+have[k])
		ok = o.want(have[k] == want[k], "the exporter's %s is %q; its security context asks for %q", k, have[k], want[k]) && ok
	}
	o.fact("exporter's /proc/%d/status: %s", pid, strings.Join(got, ", "))
	if ok {
		o.observe("security context applied")
	}
}

// exporterLogLine is the first line of the exporter container's log
// (under the kubelet's podLogsDir) that holds every one of words.
func exporterLogLine(k *kubelet, pod *corev1.Pod, words ...string) string {
	logs, _ := filepath.Glob(filepath.Join(k.dir, "pod-logs", "*_"+string(pod.UID), "*", "*.log"))
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) }) {
				return line
			}
		}
	}
	return ""
}

// exporterPID finds the exporter's process: the container runs /nodevol
// serve, which execs the agent beside it, so the process (same PID) is
// /nodevol-agent with serve's arguments.
func exporterPID() (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if len(argv) > 0 && argv[0] == "/nodevol-agent" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no /nodevol-agent process (what /nodevol serve execs) in the namespace")
}

// processMounts is the mount table of the process's mount namespace.
func processMounts(pid int) ([]*mountinfo.Info, error) {
	path := filepath.Join("/proc", strconv.Itoa(pid), "mountinfo")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ms, nil
}

// mountedIn reports whether the exporter's mount table has a mount at
// path (as the container names it).
func mountedIn(ex *staticExporter, path string) bool {
	pid, err := exporterPID()
	if err != nil {
		return false
	}
	ms, err := processMounts(pid)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(ms, func(m *mountinfo.Info) bool { return m.Mountpoint == path })
}

// processStatus is the process's /proc status, field by field ("Uid" is
// the real uid alone).
func processStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if k == "Uid" {
			v, _, _ = strings.Cut(v, "\t")
		}
		out[k] = v
	}
	return out, nil
}

// checkRootFS checks the exporter's "/" (slash, from its mount table)
// against its container's readOnlyRootFilesystem: when that is true, "/"
// must be mounted ro.
func checkRootFS(pod *corev1.Pod, slash *mountinfo.Info) error {
	sc := pod.Spec.Containers[0].SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		return nil
	}
	if slash == nil {
		return fmt.Errorf("the exporter has no mount at /; its readOnlyRootFilesystem asks for a read-only one")
	}
	if !slices.Contains(strings.Split(slash.Options, ","), "ro") {
		return fmt.Errorf("the exporter's / is mounted %q; its readOnlyRootFilesystem asks for ro", slash.Options)
	}
	return nil
}

// capabilityBits are the Linux capability numbers of the names a
// container's securityContext may add.
var capabilityBits = map[string]uint{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"FOWNER": unix.CAP_FOWNER, "KILL": unix.CAP_KILL, "SETGID": unix.CAP_SETGID, "SETUID": unix.CAP_SETUID,
	"NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_PTRACE": unix.CAP_SYS_PTRACE,
	"SYS_CHROOT": unix.CAP_SYS_CHROOT, "NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW,
}

// wantedStatus is what the pod's only container's security context says
// its process's /proc status must show: Uid for runAsUser, CapEff, CapPrm
// and CapBnd for capabilities dropping ALL (then exactly the added ones;
// CapAmb none), NoNewPrivs for
// allowPrivilegeEscalation false, Seccomp 2 (filter) for a RuntimeDefault
// or Localhost profile. A field the context does not pin is not wanted.
func wantedStatus(pod *corev1.Pod) (map[string]string, error) {
	c := pod.Spec.Containers[0]
	want := map[string]string{}
	sc := c.SecurityContext
	psc := pod.Spec.SecurityContext
	switch {
	case sc != nil && sc.RunAsUser != nil:
		want["Uid"] = strconv.FormatInt(*sc.RunAsUser, 10)
	case psc != nil && psc.RunAsUser != nil:
		want["Uid"] = strconv.FormatInt(*psc.RunAsUser, 10)
	}
	if sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") {
		var mask uint64
		for _, name := range sc.Capabilities.Add {
			bit, ok := capabilityBits[strings.TrimPrefix(string(name), "CAP_")]
			if !ok {
				return nil, fmt.Errorf("capability %q: not one the harness knows the number of", name)
			}
			mask |= 1 << bit
		}
		// Not only the effective set: a permitted or bounding set wider
		// than it would let the process (uid 0) raise what it lacks.
		for _, set := range []string{"CapEff", "CapPrm", "CapBnd"} {
			want[set] = fmt.Sprintf("%016x", mask)
		}
		want["CapAmb"] = fmt.Sprintf("%016x", 0)
	}
	if sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		want["NoNewPrivs"] = "1"
	}
	profile := (*corev1.SeccompProfile)(nil)
	if psc != nil {
		profile = psc.SeccompProfile
	}
	if sc != nil && sc.SeccompProfile != nil {
		profile = sc.SeccompProfile
	}
	if profile != nil {
		switch profile.Type {
		case corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeLocalhost:
			want["Seccomp"] = "2"
		case corev1.SeccompProfileTypeUnconfined:
			want["Seccomp"] = "0"
		}
	}
	return want, nil
}

// treeState describes every entry below dir (not below "nas"): its type,
// mode, size and modification time, and a regular file's sha256.
func treeState(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "nas" && d.IsDir() {
			out[rel] = "dir"
			return fs.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%s %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the emptyDir: %w", err)
	}
	return out, nil
}

// httpStatus is the status code of a GET of url.
func httpStatus(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// ensureNamespace creates the namespace through the API unless it exists
// (a static pod's mirror pod needs it).
func (cp *controlPlane) ensureNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
	err := cp.do(ctx, http.MethodPost, "/api/v1/namespaces", ns, nil)
	if err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}
