package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// What the rolling update of nodevol-csi must keep: a pod on each node
// whose container writes into its Default and Memory volumes every second
// across the update, reads back what it wrote, and exits at the first
// failure (its restart count says so); each volume's usage measured by
// the new driver; nothing left once the pod is deleted.

// rolloutVolumes are the writer pod's nodevol-csi volumes: medium and
// sizeLimit by name. The Default one gets a project quota where the
// node's filesystem has project quotas (its record says whether it did).
var rolloutVolumes = []struct{ name, medium, size string }{
	{"data", "Default", "64Mi"},
	{"mem", "Memory", "16Mi"},
}

// rolloutBlob is what the writer puts in each volume first, so that its
// measured usage is at least this.
const rolloutBlob = 1 << 20

// csiWriterPod is a busybox pod on the node with the driver's volumes at
// /v/<name>: it writes fromPodText and a 1 MiB blob into each, then every
// second a counter into each volume's "tick" (written beside, renamed
// into place), reading both back; any failure ends the container.
func (d *deployRun) csiWriterPod(name, node string) *corev1.Pod {
	var vols []corev1.Volume
	var names []string
	for _, v := range rolloutVolumes {
		vols = append(vols, d.csiVolume(v.name, v.medium, v.size))
		names = append(names, v.name)
	}
	p := appPod(name, node, vols)
	each := "for v in " + strings.Join(names, " ") + "; do "
	p.Spec.Containers[0].Command = []string{"sh", "-c", each +
		"echo " + fromPodText + " > /v/$v/from-pod && dd if=/dev/zero of=/v/$v/blob bs=1024 count=" + strconv.Itoa(rolloutBlob/1024) + " 2>/dev/null || exit 1; done; " +
		"i=0; while :; do i=$((i+1)); " + each +
		`echo $i > /v/$v/tick.new && mv /v/$v/tick.new /v/$v/tick && [ "$(cat /v/$v/tick)" = "$i" ] && [ "$(cat /v/$v/from-pod)" = ` + fromPodText + ` ] ` +
		`|| { echo "volume $v failed at tick $i" > /dev/termination-log; exit 1; }; done; sleep 1; done`}
	return p
}

// rolloutApp is one writer pod and its node.
type rolloutApp struct {
	node *clusterNode
	run  *apiPodRun
}

func (a rolloutApp) volumeDir(vol string) string {
	return filepath.Join(podVolumeDir(a.run.created, "kubernetes.io~csi", vol), "mount")
}

// recordPath is where the driver records the volume (in the node).
func (a rolloutApp) recordPath(vol string) string {
	return filepath.Join(kubeletRootInNode, "pods", string(a.run.created.UID), "plugins", "kubernetes.io~empty-dir", "csi_"+vol, "nodevol.json")
}

// describeRecord says what the record of the volume holds that differs
// between driver versions: its quota fields and its mount's source.
func (a rolloutApp) describeRecord(vol string) string {
	b, err := os.ReadFile(a.node.inNode(a.recordPath(vol)))
	if err != nil {
		return err.Error()
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		return err.Error()
	}
	var parts []string
	for _, k := range []string{"medium", "quotaProjectID", "quotaDirDev", "quotaDirIno", "quotaDirGen", "quotaPending"} {
		if v, ok := rec[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if m, ok := rec["mount"].(map[string]any); ok {
		parts = append(parts, fmt.Sprintf("mount.source=%v", m["source"]))
	}
	if _, ok := rec["quotaProjectID"]; !ok && rec["medium"] != "Memory" {
		parts = append(parts, "no quota project (none where the filesystem has no project quotas)")
	}
	return strings.Join(parts, " ")
}

// tick is the counter the writer last put in the volume.
func (a rolloutApp) tick(vol string) (int, error) {
	b, err := os.ReadFile(a.node.inNode(filepath.Join(a.volumeDir(vol), "tick")))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// writing checks that the writer is running without a restart and that
// its counter advances in every volume.
func (a rolloutApp) writing(ctx context.Context, when string, o *outcome) bool {
	p, err := a.run.api.apiPod(ctx, a.run.created.Namespace, a.run.created.Name)
	if err != nil {
		o.harness(err)
		return false
	}
	ok := true
	for _, cs := range p.Status.ContainerStatuses {
		why := ""
		if t := cs.LastTerminationState.Terminated; t != nil {
			why = t.Message
		}
		ok = o.want(cs.RestartCount == 0 && cs.State.Running != nil, "%s %s: the writer restarted %d times or is not running (%s)", when, a.node.name, cs.RestartCount, why) && ok
	}
	for _, v := range rolloutVolumes {
		first, err := a.tick(v.name)
		if !o.want(err == nil, "%s %s: volume %s: no counter: %v", when, a.node.name, v.name, err) {
			ok = false
			continue
		}
		var last int
		err = poll(ctx, 10*time.Second, func() (bool, error) {
			last, _ = a.tick(v.name)
			return last > first, nil
		})
		ok = o.want(err == nil, "%s %s: volume %s: the pod's counter stays at %d", when, a.node.name, v.name, first) && ok
	}
	return ok
}

// csiStatsCalls is how many NodeGetVolumeStats calls the node's driver pod
// answered, with OK and otherwise.
func (d *deployRun) csiStatsCalls(ctx context.Context, node string) (ok, failed float64, err error) {
	m, err := d.csiMetrics(ctx, node)
	if err != nil {
		return 0, 0, err
	}
	all := m.value("nodevol_csi_calls_total", map[string]string{"method": "NodeGetVolumeStats"})
	ok = m.value("nodevol_csi_calls_total", map[string]string{"method": "NodeGetVolumeStats", "code": "OK"})
	return ok, all - ok, nil
}

// summaryVolumes is the used bytes of the pod's volumes in the kubelet's
// stats summary (read-only port), by volume name.
func (n *clusterNode) summaryVolumes(ctx context.Context, uid string) (map[string]uint64, error) {
	var s struct {
		Pods []struct {
			PodRef struct {
				UID string `json:"uid"`
			} `json:"podRef"`
			Volume []struct {
				Name      string  `json:"name"`
				UsedBytes *uint64 `json:"usedBytes"`
			} `json:"volume"`
		} `json:"pods"`
	}
	err := n.kubelet.get(ctx, n.kubelet.url(readOnlyPort, "/stats/summary"), func(r io.Reader) error { return json.NewDecoder(r).Decode(&s) })
	if err != nil {
		return nil, err
	}
	used := map[string]uint64{}
	for _, p := range s.Pods {
		if p.PodRef.UID != uid {
			continue
		}
		for _, v := range p.Volume {
			if v.UsedBytes != nil {
				used[v.Name] = *v.UsedBytes
			}
		}
	}
	return used, nil
}

// measuredByNewDriver waits until the node's new driver pod has answered
// NodeGetVolumeStats for each of the writer's volumes (the kubelet asks
// once per volume per --volume-stats-agg-period, a minute), none failed,
// and the kubelet's summary shows each volume holding at least the blob.
func (d *deployRun) measuredByNewDriver(ctx context.Context, a rolloutApp, o *outcome) bool {
	t0 := time.Now()
	var okCalls, failed float64
	var used map[string]uint64
	err := poll(ctx, 3*time.Minute, func() (bool, error) {
		var err error
		okCalls, failed, err = d.csiStatsCalls(ctx, a.node.name)
		switch {
		case err == nil && failed > 0:
			return false, fmt.Errorf("%v failed calls", failed)
		case err != nil || okCalls < float64(len(rolloutVolumes)):
			return false, nil
		}
		if used, err = a.node.summaryVolumes(ctx, string(a.run.created.UID)); err != nil {
			return false, nil
		}
		for _, v := range rolloutVolumes {
			if used[v.name] < rolloutBlob {
				return false, nil
			}
		}
		return true, nil
	})
	if !o.want(err == nil, "%s: the new driver's NodeGetVolumeStats: %v OK, %v failed, summary %v: %v", a.node.name, okCalls, failed, used, err) {
		return false
	}
	o.fact("%s: the new driver answered %v NodeGetVolumeStats, none failed (waited %.0fs for the kubelet to ask); the kubelet's summary: %v bytes used", a.node.name, okCalls, time.Since(t0).Seconds(), used)
	return true
}

// leftBehind lists what the pod's volumes left on the node once its
// directory is gone: mounts under it, and its volumes' paths in the
// driver's quota bookkeeping.
func (d *deployRun) leftBehind(a rolloutApp, uid string) []string {
	var left []string
	podDir := filepath.Join(kubeletRootInNode, "pods", uid)
	ms, err := a.node.mountsUnder(podDir)
	if err != nil {
		left = append(left, err.Error())
	}
	left = append(left, ms...)
	for _, f := range []string{"projects", "projid"} {
		b, err := os.ReadFile(a.node.inNode(filepath.Join(kubeletRootInNode, "plugins", d.driver, f)))
		if err == nil && strings.Contains(string(b), uid) {
			left = append(left, fmt.Sprintf("%s names the pod: %q", f, b))
		}
	}
	return left
}
