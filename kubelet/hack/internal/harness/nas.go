package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// nasKind is what the host mounts inside the emptyDir as the "NAS".
type nasKind int

const (
	nasTmpfs nasKind = iota // a tmpfs: another filesystem
	nasBind                 // a bind mount of a host directory on the volume's own filesystem
)

func (k nasKind) String() string {
	switch k {
	case nasTmpfs:
		return "tmpfs"
	case nasBind:
		return "bind mount"
	}
	return fmt.Sprintf("nasKind(%d)", int(k))
}

// restartMode says whether the kubelet is restarted between the pod's
// start and its deletion.
type restartMode int

const (
	noRestart restartMode = iota
	// restartAcrossDeletion stops the kubelet, removes the manifest while
	// it is down and starts it again: the new kubelet knows the volume
	// only from disk (reconstruction) and tears down an orphan.
	restartAcrossDeletion
)

// sentinelSize is the size of the NAS's precious file.
const sentinelSize = 64 << 10

// expectNAS is the expected result: upstream's RemoveAll empties the NAS
// before it fails with EBUSY on the mount point (the incident), nodevol
// refuses and deletes nothing until the NAS is gone.
func expectNAS(f flavor) string {
	if f == stockKubelet {
		return "sentinel DELETED (the incident); gone after umount"
	}
	return "sentinel+files intact; refusal names mount; ≥2 tries, backoff; gone after umount"
}

// nasScenario mounts a NAS with a sentinel inside a running pod's Default
// emptyDir, deletes the pod, and looks at what the kubelet's teardown did.
func nasScenario(kind nasKind, restart restartMode) func(context.Context, *scenarioEnv, *outcome) {
	return func(ctx context.Context, env *scenarioEnv, o *outcome) {
		k := env.kubelet
		pod := busyboxPod(env.podName, env.uid, "echo "+fromPodText+" > /data/from-pod",
			[]corev1.VolumeMount{{Name: scratchVolume, MountPath: "/data"}},
			[]corev1.Volume{{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}})
		if !startPod(ctx, env, pod, o) {
			return
		}
		vol := k.volumeDir(pod, emptyDirDir, scratchVolume)
		fromPod := filepath.Join(vol, "from-pod")
		if err := poll(ctx, 10*time.Second, func() (bool, error) { _, err := os.Stat(fromPod); return err == nil, nil }); err != nil {
			o.harness(fmt.Errorf("the container did not write %s: %w", fromPod, err))
			return
		}
		own := make([]byte, 4096)
		sentinel := make([]byte, sentinelSize)
		_, _ = rand.Read(own)
		_, _ = rand.Read(sentinel)
		if err := os.WriteFile(filepath.Join(vol, "own-file"), own, 0o644); err != nil {
			o.harness(err)
			return
		}
		nas := filepath.Join(vol, "nas")
		sentinelPath := filepath.Join(nas, "SENTINEL")
		hostShare := filepath.Join(env.dir, "share") // the bind mount's source
		if err := mountNAS(kind, nas, hostShare, sentinel); err != nil {
			o.harness(err)
			return
		}
		mounted := true
		defer func() {
			if mounted {
				_ = unix.Unmount(nas, unix.MNT_DETACH)
			}
		}()

		// The kubelet's alert on failed emptyDir teardowns, on the real
		// kubelet's /metrics: the node is healthy before the deletion.
		var alert *alertScrapes
		var base float64
		if env.kubeletAlert != nil {
			alert = &alertScrapes{k: k, sel: *env.kubeletAlert, dir: env.dir}
			var err error
			if base, _, err = alert.scrape(ctx, "healthy"); err != nil {
				o.harness(err)
				return
			}
		}

		if restart == restartAcrossDeletion {
			k.stop()
			env.log.Printf("kubelet stopped; removing the manifest while it is down")
			base = 0 // a new kubelet process counts from 0
		}
		offset, err := k.removePod(pod)
		if err != nil {
			o.harness(err)
			return
		}
		t0 := time.Now()
		if restart == restartAcrossDeletion {
			if err := k.start(ctx); err != nil {
				o.harness(fmt.Errorf("restarting the kubelet: %w", err))
				return
			}
			o.observe("kubelet restarted")
		}

		attempts := teardownAttempts{re: teardownLine(pod, scratchVolume)}
		err = poll(ctx, 90*time.Second, func() (bool, error) {
			if err := attempts.read(k, offset); err != nil {
				return false, err
			}
			return len(attempts.lines) > 0, k.alive()
		})
		if err != nil {
			o.harness(fmt.Errorf("no TearDown of the volume in the kubelet's log: %w", err))
			return
		}
		o.time("manifest removed → first TearDown", time.Since(t0))
		firstFailures := attempts.failures()
		var refused1 float64
		var found1 bool
		if alert != nil {
			if refused1, found1, err = alert.scrape(ctx, "refused-1"); err != nil {
				o.harness(err)
				return
			}
		}
		// The refusal must be retried with backoff: wait for a second
		// attempt, and for the alert's check two more after the scrape (one
		// failure may have been counted before it was logged).
		want := 0
		if env.flavor == nodevolKubelet {
			want = 2
		}
		if alert != nil {
			want = max(want, firstFailures+2)
		}
		if want > 0 {
			err = poll(ctx, 30*time.Second, func() (bool, error) {
				return attempts.failures() >= want || attempts.succeeded(), attempts.read(k, offset)
			})
			if err != nil {
				o.harness(fmt.Errorf("waiting for %d TearDown attempts: %w", want, err))
			}
		}
		if alert != nil {
			laterFailures := attempts.failures()
			refused2, _, err := alert.scrape(ctx, "refused-2")
			if err != nil {
				o.harness(err)
				return
			}
			// The counter is the kubelet's, which scenarios run beside
			// this one share: only lower bounds hold.
			o.fact("the kubelet's %s (alert %s): %g before the deletion, %g after %d failed TearDowns, %g after %d", alert.sel, kubeletTeardownAlert, base, refused1, firstFailures, refused2, laterFailures)
			o.want(found1 && refused1-base >= float64(firstFailures), "the kubelet's /metrics has no series %s counting the %d failed TearDowns (%g before the deletion, %g after): the alert %s cannot fire", alert.sel, firstFailures, base, refused1, kubeletTeardownAlert)
			o.want(refused2 > refused1 && refused2-base >= float64(laterFailures), "the kubelet's %s went from %g to %g while %d failed TearDowns became %d: the alert %s's increase() does not see the retries", alert.sel, refused1, refused2, firstFailures, laterFailures, kubeletTeardownAlert)
		}

		sentinelLeft, sentinelOK := readFileOr(sentinelPath)
		intact := sentinelOK && bytes.Equal([]byte(sentinelLeft), sentinel)
		switch {
		case intact:
			o.observe("sentinel intact")
			o.fact("sentinel intact: %d bytes, sha256 %x", len(sentinel), sha256.Sum256(sentinel))
		case !sentinelOK:
			o.observe("sentinel DELETED")
		default:
			o.observe("sentinel CHANGED")
		}
		ownLeft, ownOK := readFileOr(filepath.Join(vol, "own-file"))
		podLeft, podOK := readFileOr(fromPod)
		ownIntact := ownLeft == string(own) && podLeft == fromPodText+"\n"
		if ownIntact {
			o.fact("the volume's own files intact (own-file, from-pod)")
		} else {
			o.fact("the volume's own files: own-file %s, from-pod %s", map[bool]string{true: "present", false: ownLeft}[ownOK], map[bool]string{true: "present", false: podLeft}[podOK])
		}
		if first := attempts.firstFailure(k.root); first != "" {
			o.fact("first TearDown error: %s", first)
		}
		o.observe("%d failed %s", attempts.failures(), map[bool]string{true: "try", false: "tries"}[attempts.failures() == 1])

		// The kubelet's own metric counts every failed attempt (before it
		// logs it), for either kubelet: what an operator can alert on. The
		// counter is the kubelet's, shared by the scenarios that run side
		// by side: runFlavor checks it against all of theirs (the alert's
		// check above bounds this scenario's share).
		o.unmountFailures = attempts.failures()

		if env.flavor == stockKubelet {
			o.want(!sentinelOK, "the stock kubelet left the sentinel: the incident did not reproduce")
		} else {
			o.want(intact, "sentinel not intact: %s", map[bool]string{true: "changed", false: "deleted"}[sentinelOK])
			o.want(ownIntact, "the volume's own files were touched")
			o.want(attempts.failures() >= 2, "want ≥2 refused TearDown attempts (retried), saw %d", attempts.failures())
			if o.want(attempts.everyFailureRefuses(nas), "not every TearDown failure is nodevol's refusal (\"emptyDir teardown of … refused\") naming the NAS mount %s", nas) {
				o.observe("refusal names the mount")
			}
			d := attempts.delays()
			o.observe("delays %s", strings.Join(d, ", "))
			o.want(delaysGrow(d), "retry delays do not grow: %s", strings.Join(d, ", "))
		}

		if err := unix.Unmount(nas, 0); err != nil {
			o.harness(&os.PathError{Op: "umount", Path: nas, Err: err})
			return
		}
		mounted = false
		t1 := time.Now()
		if waitPodGone(ctx, env, pod, 90*time.Second, o) {
			o.observe("gone after umount")
			o.time("NAS unmounted → pod directory gone", time.Since(t1))
			if alert != nil {
				if _, _, err := alert.scrape(ctx, "torn-down"); err != nil {
					o.harness(err)
				}
			}
			if err := attempts.read(k, offset); err != nil {
				o.harness(err)
			}
			o.want(attempts.succeeded(), "the pod directory went, but no \"TearDown succeeded\" for the volume in the kubelet's log")
		}
		if kind == nasBind {
			left, ok := readFileOr(filepath.Join(hostShare, "SENTINEL"))
			hostIntact := ok && left == string(sentinel)
			o.fact("the bind mount's host directory after teardown: sentinel %s", map[bool]string{true: "intact", false: "gone or changed"}[hostIntact])
			if env.flavor == nodevolKubelet {
				o.want(hostIntact, "the bind-mounted host directory lost its sentinel")
			}
		}
	}
}

// mountNAS mounts the "NAS" at dir: a fresh tmpfs holding the sentinel,
// or a bind mount of hostShare (created holding the sentinel).
func mountNAS(kind nasKind, dir, hostShare string, sentinel []byte) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	switch kind {
	case nasTmpfs:
		if err := unix.Mount("e2e-nas", dir, "tmpfs", 0, "size=4m"); err != nil {
			return &os.PathError{Op: "mount tmpfs", Path: dir, Err: err}
		}
	case nasBind:
		if err := os.MkdirAll(hostShare, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(hostShare, dir, "", unix.MS_BIND, ""); err != nil {
			return &os.PathError{Op: "mount MS_BIND " + hostShare, Path: dir, Err: err}
		}
	}
	return os.WriteFile(filepath.Join(dir, "SENTINEL"), sentinel, 0o644)
}

// teardownLine matches the kubelet's log lines about a TearDown of the
// pod's emptyDir volume.
func teardownLine(pod *corev1.Pod, vol string) *regexp.Regexp {
	return regexp.MustCompile(`UnmountVolume\.TearDown (failed|succeeded) for volume "kubernetes\.io/empty-dir/` + regexp.QuoteMeta(string(pod.UID)+"-"+vol) + `"`)
}

// teardownAttempts collects the kubelet's log lines about one volume's
// TearDown.
type teardownAttempts struct {
	re     *regexp.Regexp
	offset int64
	lines  []string
}

// read adds the lines logged since the last read (from offset the first time).
func (a *teardownAttempts) read(k *kubelet, offset int64) error {
	if a.offset < offset {
		a.offset = offset
	}
	lines, next, err := k.logLines(a.offset, a.re)
	if err != nil {
		return err
	}
	a.lines = append(a.lines, lines...)
	a.offset = next
	return nil
}

// retryLine marks the line the kubelet logs once per failed operation:
// nestedpendingoperations' "No retries permitted until … (durationBeforeRetry D)".
var retryLine = regexp.MustCompile(`durationBeforeRetry ([0-9.a-z]+)`)

// failures counts failed attempts: one retry line each.
func (a *teardownAttempts) failures() int {
	n := 0
	for _, l := range a.lines {
		if strings.Contains(l, "TearDown failed") && retryLine.MatchString(l) {
			n++
		}
	}
	return n
}

func (a *teardownAttempts) succeeded() bool {
	for _, l := range a.lines {
		if strings.Contains(l, "TearDown succeeded") {
			return true
		}
	}
	return false
}

// delays are the retry delays the kubelet announced, in order.
func (a *teardownAttempts) delays() []string {
	var d []string
	for _, l := range a.lines {
		if m := retryLine.FindStringSubmatch(l); m != nil && strings.Contains(l, "TearDown failed") {
			d = append(d, m[1])
		}
	}
	return d
}

// firstFailure is the error text of the first failed attempt, with the
// kubelet's root directory written $ROOT.
func (a *teardownAttempts) firstFailure(root string) string {
	for _, l := range a.lines {
		if _, after, ok := strings.Cut(l, "TearDown failed for volume"); ok {
			if _, msg, ok := strings.Cut(after, ") : "); ok {
				after = msg
			}
			return strings.TrimSpace(strings.ReplaceAll(after, root, "$ROOT"))
		}
	}
	return ""
}

// everyFailureRefuses reports whether there is a failed attempt and every
// failed attempt's error is nodevol's refusal ("emptyDir teardown of …
// refused") naming the mount at path.
func (a *teardownAttempts) everyFailureRefuses(path string) bool {
	n := 0
	for _, l := range a.lines {
		if !strings.Contains(l, "TearDown failed") {
			continue
		}
		if !strings.Contains(l, "emptyDir teardown of") || !strings.Contains(l, "refused") || !strings.Contains(l, path) {
			return false
		}
		n++
	}
	return n > 0
}

// delaysGrow reports whether the announced retry delays grow strictly
// (the kubelet doubles them up to its cap, far beyond a scenario's span).
func delaysGrow(delays []string) bool {
	var prev time.Duration
	for _, s := range delays {
		d, err := time.ParseDuration(s)
		if err != nil || d <= prev {
			return false
		}
		prev = d
	}
	return len(delays) >= 2
}
