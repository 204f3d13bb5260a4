package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/base/plural"
	"github.com/nodevol/nodevol/internal/cli"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/reconciler"
	"github.com/nodevol/nodevol/volume"
)

const (
	demoPodUID = "3f6c2a1e-7b4d-4c9a-9e21-5d8f0b6a4c17" // pod "web"
	demoDBUID  = "9b1d4e7f-2c3a-4d5e-8f60-7a1b2c3d4e5f" // pod "db"
	// demoNASData is what the "NAS" holds; the demo reads it back.
	demoNASData = "invoices 2019-2025: the only copy, kept on the NAS"
	// demoDBData is what pod db keeps in its volume across the restart.
	demoDBData = "orders table, 3 rows"

	demoAllocatable = 1 << 30   // the node's allocatable memory
	demoMemoryLimit = 256 << 20 // pod web's memory limit
	demoSizeLimit   = 64 << 20  // the Memory volume's sizeLimit
	demoHugePage    = 2 << 20
	demoHugePages   = "/sys/kernel/mm/hugepages/hugepages-2048kB"

	// Small backoffs make the Manager's retries visible within a second.
	demoInitialBackoff = 100 * time.Millisecond
	demoMaxBackoff     = 400 * time.Millisecond
	// demoRefusedWait is how long the demo waits for a teardown that a
	// NAS mount blocks; demoWait bounds every wait that should succeed.
	demoRefusedWait = time.Second
	demoWait        = 5 * time.Second

	refusedMetric = "nodevol_teardown_refused_total"
)

// isolation says whether the demo may mount in this process.
type isolation struct {
	canMount bool
	// skip explains, when canMount is false, what the demo leaves out.
	skip string
}

// demo is one run of nodevol-demo: a temporary kubelet root under tmp,
// a volume manager (reconciler.Manager) with the emptyDir plugin working
// on it, and whatever was mounted there, so that cleanup can undo it.
type demo struct {
	// ctx is cancelled when the demo is interrupted: every wait ends then,
	// and cleanup (which does not use it) undoes what was done.
	ctx         context.Context
	out         io.Writer
	tmp         string
	root        string // the kubelet root, shown as $ROOT
	vol         string // pod web's Default volume "cache", shown as $VOL
	nas         string // the NAS directory outside the volume (no root), shown as $NAS
	layout      volume.Layout
	canMount    bool
	mounted     string // the NAS mount point while mounted
	mountedOnce bool   // something was mounted at some point
	stop        func() error
}

// demoHelp is the help of nodevol-demo, after its usage line.
const demoHelp = `Run the volume manager (reconciler.Manager) with the emptyDir plugin on a
throwaway kubelet root in a temporary directory, with small retry backoffs
(100ms doubling to 400ms) so that retries show within a second:

  - two pods, web and db, are added and their volumes set up;
  - web is removed while a "NAS" is mounted inside its Default volume: the
    teardown is refused, again at every retry, and the NAS keeps its data;
    once the NAS is unmounted the next retry tears web down;
  - the Manager is stopped and a new one started on the same root: it
    reconstructs db's volume from disk (uncertain), verifies it when db is
    added again, and tears it down when db is removed;
  - a final "nodevol scan" finds nothing left.

As root the demo runs in a private mount namespace, and pod web also gets a
Memory (tmpfs with a sizeLimit) and, when the kernel has 2 MiB huge pages, a
HugePages-2Mi volume. Without root there is no NAS mount: a symlink in web's
Default volume points to a "NAS" directory outside it, and the teardown
removes the link without following it. Everything is removed afterwards,
also when the demo is interrupted (SIGINT, SIGTERM) or its output is
closed (SIGPIPE: "nodevol-demo | head -1").

Exit status: 0 every promise held, 2 one was broken (or the sandbox could
not be built or removed), 130 or 143 interrupted by SIGINT or SIGTERM and
cleaned up, 141 stopped by SIGPIPE and cleaned up.`

// runDemo runs the demo once its arguments (none) were found right.
func runDemo(stdout, stderr io.Writer) int {
	// SIGINT, SIGTERM and SIGPIPE are caught before anything is made, so
	// that no moment is left at which one would leave the sandbox behind.
	// The first stops the demo, which then cleans up as after a failure;
	// later ones are ignored until it is done (a terminal's Ctrl-C reaches
	// both the demo and its re-executed child, which also gets the one its
	// parent passes on). SIGPIPE is the reader of the output going away
	// ("nodevol-demo | head -1"): caught, a write to the closed pipe fails
	// with EPIPE instead of killing the process before its cleanup.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	iso, code, done := isolateDemo(nil, sigs, stdout, stderr)
	if done {
		return code
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case sig := <-sigs:
			cancel(&interruptedError{sig})
		case <-ctx.Done():
		}
	}()
	return playDemo(ctx, iso, stdout, stderr)
}

// interruptedError is why the demo stopped when a signal stopped it.
type interruptedError struct{ sig os.Signal }

func (e *interruptedError) Error() string { return "interrupted by " + signalName(e.sig) }

// code is the exit status of a command interrupted by the signal, as a
// shell reports one that died of it: 128+signal (130 for SIGINT).
func (e *interruptedError) code() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitError
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return sig.String()
}

// playDemo runs the demo here, in a new sandbox under $TMPDIR, until it is
// done or ctx is cancelled (with an *interruptedError cause when a signal
// stopped it), and removes the sandbox either way.
func playDemo(ctx context.Context, iso isolation, stdout, stderr io.Writer) int {
	tmp, err := os.MkdirTemp("", "nodevol-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "nodevol demo: %v\n", err)
		return exitError
	}
	out := &brokenPipeWriter{w: stdout}
	d := &demo{ctx: ctx, out: out, tmp: tmp, canMount: iso.canMount}
	err = d.build()
	if err == nil {
		err = d.run(iso.skip)
	}
	cerr := d.cleanup()
	// When a signal stopped the demo, whatever its last step failed with
	// is only the interruption: say that, and whether the cleanup worked.
	// Stopped by SIGPIPE, nobody reads the output any more: the demo stops
	// as quietly as a pipeline expects, and says only a failed cleanup.
	var stopped *interruptedError
	if !errors.As(context.Cause(ctx), &stopped) && err != nil && out.broken.Load() {
		// A write failed with EPIPE: the kernel raised SIGPIPE with it,
		// but the signal reaches the channel asynchronously, and a step
		// that failed on that write may get here first.
		stopped = &interruptedError{syscall.SIGPIPE}
	}
	if stopped != nil && err != nil {
		if cerr != nil {
			fmt.Fprintf(stderr, "nodevol demo: %v; %v\n", stopped, cerr)
			return exitError
		}
		if stopped.sig != syscall.SIGPIPE {
			fmt.Fprintf(stderr, "nodevol demo: %v; the sandbox %s was cleaned up\n", stopped, tmp)
		}
		return stopped.code()
	}
	if err = errors.Join(err, cerr); err != nil {
		fmt.Fprintf(stderr, "nodevol demo: %v\n", err)
		return exitError
	}
	return exitOK
}

// brokenPipeWriter is the demo's output: it remembers that a write failed
// with EPIPE (its reader went away), which stops the demo as SIGPIPE does.
type brokenPipeWriter struct {
	w      io.Writer
	broken atomic.Bool
}

func (b *brokenPipeWriter) Write(p []byte) (int, error) {
	n, err := b.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		b.broken.Store(true)
	}
	return n, err
}

// build makes the kubelet root's layout. The kernel names mount points
// with symlinks resolved, so the root is resolved too: the demo's output
// then shortens every path the same way.
func (d *demo) build() error {
	tmp, err := filepath.EvalSymlinks(d.tmp)
	if err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	d.root = filepath.Join(tmp, "kubelet")
	if d.layout, err = volume.NewLayout(d.root); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	if d.vol, err = d.layout.VolumeDir(demoPodUID, emptydir.PluginName, "cache"); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	return nil
}

// pods are the demo's two pods: web, with a Default volume (and as root a
// Memory and a HugePages one), and db, with one Default volume.
func (d *demo) pods() (web, db *volume.Pod, about []string) {
	web = &volume.Pod{UID: demoPodUID, Namespace: "default", Name: "web",
		Volumes:     []volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{}}},
		MemoryLimit: demoMemoryLimit, HugePages: map[int64]int64{demoHugePage: 8 * demoHugePage}}
	webAbout := "cache Default"
	if d.canMount {
		web.Volumes = append(web.Volumes, volume.Spec{Name: "scratch", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumMemory, SizeLimit: demoSizeLimit}})
		webAbout += ", scratch Memory (sizeLimit 64Mi, pod limit 256Mi)"
		if _, err := os.Stat(demoHugePages); err == nil {
			web.Volumes = append(web.Volumes, volume.Spec{Name: "huge", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumHugePagesPrefix + "2Mi"}})
			webAbout += ", huge HugePages-2Mi"
		} else {
			webAbout += " (no HugePages-2Mi: " + demoHugePages + " does not exist)"
		}
	}
	db = &volume.Pod{UID: demoDBUID, Namespace: "default", Name: "db",
		Volumes: []volume.Spec{{Name: "data", EmptyDir: &volume.EmptyDirSource{}}}}
	return web, db, []string{webAbout, "data Default"}
}

// startManager starts a Manager on the demo's root, with a fresh emptyDir
// plugin (as a restarted process would have) and a logger that discards
// everything, and runs it until d.stop.
func (d *demo) startManager(reg prometheus.Registerer) (*reconciler.Manager, error) {
	logger := logr.Discard()
	m, err := reconciler.New(reconciler.Options{
		Root:           d.root,
		Plugins:        []volume.Plugin{emptydir.New(volume.NewHost(d.layout, nil, demoAllocatable))},
		Logger:         &logger,
		Registerer:     reg,
		InitialBackoff: demoInitialBackoff,
		MaxBackoff:     demoMaxBackoff,
	})
	if err != nil {
		return nil, fmt.Errorf("start the Manager: %w", err)
	}
	// Run prefers the context's logger to Options.Logger, and klog's
	// global one when the context has none: give it the quiet one.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	d.stop = func() error {
		d.stop = nil
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("Manager.Run: %w", err)
		}
		return nil
	}
	return m, nil
}

// run is the whole demo.
func (d *demo) run(skip string) error {
	fmt.Fprintln(d.out, "nodevol demo: the volume manager (reconciler.Manager) with the emptyDir plugin, on a temporary kubelet root")
	if d.canMount {
		fmt.Fprintln(d.out, "(in a private mount namespace: no mount made here can reach the host)")
	} else {
		fmt.Fprintln(d.out, skip)
	}
	fmt.Fprintf(d.out, "  ROOT=%s\n", d.root)
	fmt.Fprintln(d.out, "  Manager 1: reconciler.New(Options{Root: $ROOT, Plugins: emptyDir, InitialBackoff: 100ms, MaxBackoff: 400ms}); go Run(ctx)")
	fmt.Fprintln(d.out)

	reg := prometheus.NewRegistry()
	m, err := d.startManager(reg)
	if err != nil {
		return err
	}
	web, db, about := d.pods()
	fmt.Fprintln(d.out, "Two pods arrive; the Manager sets their volumes up:")
	fmt.Fprintf(d.out, "  AddPod(web): %s\n", about[0])
	fmt.Fprintf(d.out, "  AddPod(db):  %s\n", about[1])
	for _, p := range []*volume.Pod{web, db} {
		if err := m.AddPod(p); err != nil {
			return fmt.Errorf("AddPod(%s): %w", p.Name, err)
		}
	}
	m.MarkSourcesReady()
	start := time.Now()
	for _, p := range []*volume.Pod{web, db} {
		if err := d.waitMount(m, p); err != nil {
			return err
		}
	}
	fmt.Fprintf(d.out, "  MarkSourcesReady(); WaitForMount(web), WaitForMount(db): ok after %s\n", since(start))
	fmt.Fprintln(d.out, "  MountedVolumes(web), MountedVolumes(db):")
	if err := d.printVolumes(m, web, db); err != nil {
		return err
	}
	if err := writeFiles(d.vol, map[string]string{"index.db": "pod scratch data", "tmp/chunk-0001": "more scratch"}); err != nil {
		return fmt.Errorf("fill $VOL: %w", err)
	}
	if err := writeFiles(d.dbVol(), map[string]string{"data.db": demoDBData}); err != nil {
		return fmt.Errorf("fill db's volume: %w", err)
	}
	fmt.Fprintln(d.out)

	if d.canMount {
		if err := d.tearDownWithNAS(m, reg, web); err != nil {
			return err
		}
	} else if err := d.tearDownWithSymlink(m, web); err != nil {
		return err
	}
	fmt.Fprintln(d.out)

	fmt.Fprintln(d.out, "Restart: Manager 1 stops (its context is cancelled); db's volume stays on disk, data.db in it.")
	if err := d.stop(); err != nil {
		return err
	}
	if m, err = d.startManager(nil); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "Manager 2 starts on the same $ROOT and reconstructs what it finds there:")
	if err := d.reconstructed(m, db); err != nil {
		return err
	}
	if err := m.AddPod(db); err != nil {
		return fmt.Errorf("AddPod(db): %w", err)
	}
	m.MarkSourcesReady()
	if err := d.waitMount(m, db); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  AddPod(db); MarkSourcesReady(); WaitForMount(db): ok, SetUp verified it: %s\n", d.states(m, db))
	if err := d.dbIntact(); err != nil {
		return err
	}
	m.RemovePod(db.UID)
	if err := d.waitUnmount(m, db); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "  RemovePod(db); WaitForUnmount(db), WaitForPodRemoval(db): ok; db's pod directory is gone")
	if err := d.step("nodevol scan --root $ROOT", exitOK, func(w io.Writer) int { return cli.Run([]string{"scan", "--root", d.root}, w, w) }); err != nil {
		return err
	}
	if err := d.stop(); err != nil {
		return err
	}
	if d.canMount {
		if mounts, err := mountPointsUnder(d.root); err != nil || len(mounts) > 0 {
			return fmt.Errorf("PROMISE BROKEN: every pod is gone but mounts are left under $ROOT: %q (%v)", mounts, err)
		}
	}
	fmt.Fprintln(d.out)
	if d.canMount {
		fmt.Fprintln(d.out, "OK: the NAS was never touched; web was torn down at the first retry after it was unmounted;")
	} else {
		fmt.Fprintln(d.out, "OK: the teardown removed the link and never followed it: the data outside the volume survived;")
	}
	fmt.Fprintln(d.out, "after the restart, db's volume was found on disk, kept with its data, and torn down when db went.")
	return nil
}

// tearDownWithNAS removes pod web while a NAS is mounted in its Default
// volume: the teardown is refused at every retry and the NAS keeps its
// data; once the NAS is unmounted, the next retry succeeds.
func (d *demo) tearDownWithNAS(m *reconciler.Manager, reg prometheus.Gatherer, web *volume.Pod) error {
	nas := filepath.Join(d.vol, "nas")
	if err := os.Mkdir(nas, 0o755); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	if err := mountNAS(nas); err != nil {
		return fmt.Errorf("mount the NAS: %w", err)
	}
	d.mounted, d.mountedOnce = nas, true
	if err := writeFiles(nas, map[string]string{"important.txt": demoNASData}); err != nil {
		return fmt.Errorf("fill the NAS: %w", err)
	}
	fmt.Fprintf(d.out, "The pods write files into their volumes, and a sidecar of web mounts a \"NAS\" (a 1 MiB tmpfs)\n")
	fmt.Fprintf(d.out, "holding important.txt at $VOL/nas, inside web's cache volume:\n  VOL=%s\n", d.vol)
	if err := d.step("nodevol scan --root $ROOT", exitRefused, func(w io.Writer) int { return cli.Run([]string{"scan", "--root", d.root}, w, w) }); err != nil {
		return err
	}
	fmt.Fprintln(d.out)

	fmt.Fprintln(d.out, "web is deleted. The kubelet would now os.RemoveAll($VOL), emptying the NAS; nodevol's teardown refuses:")
	m.RemovePod(web.UID)
	ctx, cancel := context.WithTimeout(d.ctx, demoRefusedWait)
	err := m.WaitForUnmount(ctx, web.UID)
	cancel()
	if d.ctx.Err() != nil {
		return d.ctx.Err()
	}
	var crosses *mountdetect.CrossesMountError
	switch {
	case err == nil:
		return errors.New("PROMISE BROKEN: WaitForUnmount(web) succeeded: the teardown of a volume with a NAS mounted inside was not refused")
	case !errors.As(err, &crosses):
		return fmt.Errorf("PROMISE BROKEN: WaitForUnmount(web) failed, but not with a *mountdetect.CrossesMountError: %w", err)
	}
	fmt.Fprintf(d.out, "  RemovePod(web); WaitForUnmount(web) gives up after its %s timeout (%s);\n", demoRefusedWait, context.DeadlineExceeded)
	fmt.Fprintln(d.out, "  errors.As finds the *mountdetect.CrossesMountError of the last refusal:")
	reason, remedy := crosses.Error(), ""
	var refused *emptydir.RefusedError
	if errors.As(err, &refused) {
		reason, remedy = refused.Plan.Reason, refused.Plan.Remedy
	}
	fmt.Fprintf(d.out, "    %s\n", d.short().Replace(reason))
	for _, mnt := range crosses.Mounts {
		fmt.Fprintf(d.out, "    %s\n", d.short().Replace(mnt.String()))
	}
	if remedy != "" {
		fmt.Fprintf(d.out, "    %s\n", remedy)
	}
	n, err := counterValue(reg, refusedMetric, "plugin", emptydir.PluginName)
	if err != nil {
		return fmt.Errorf("read %s: %w", refusedMetric, err)
	}
	if n < 1 {
		return fmt.Errorf("PROMISE BROKEN: %s{plugin=%q} is %v after a refused teardown", refusedMetric, emptydir.PluginName, n)
	}
	fmt.Fprintf(d.out, "  %s{plugin=%q} = %v: %s\n", refusedMetric, emptydir.PluginName, n, attempts(int(n)))
	fmt.Fprintf(d.out, "  MountedVolumes(web): %s; the others were unmounted and removed\n", d.states(m, web))
	if err := d.intact(filepath.Join(nas, "important.txt"), "$VOL/nas/important.txt"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(d.vol, "index.db")); err != nil {
		return fmt.Errorf("PROMISE BROKEN: a refused teardown deleted the pod's own files: %w", err)
	}
	if _, err := os.Stat(d.readyMarker(demoPodUID, "cache")); err != nil {
		return fmt.Errorf("PROMISE BROKEN: a refused teardown removed the ready marker: %w", err)
	}
	fmt.Fprintln(d.out, "web's own files in $VOL and its ready marker are still there too: a refused teardown changes nothing.")
	fmt.Fprintln(d.out)

	fmt.Fprintln(d.out, "The sidecar is gone; unmount the NAS:")
	fmt.Fprintln(d.out, "$ umount $VOL/nas")
	if err := unmountNAS(nas); err != nil {
		return fmt.Errorf("unmount the NAS: %w", err)
	}
	d.mounted = ""
	start := time.Now()
	if err := d.waitUnmount(m, web); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  WaitForUnmount(web), WaitForPodRemoval(web): ok after %s, at the next retry; web's volumes and pod directory are gone\n", since(start))
	return nil
}

// tearDownWithSymlink removes pod web while its Default volume holds a
// symlink to a "NAS" directory outside it: the link goes, the NAS stays.
func (d *demo) tearDownWithSymlink(m *reconciler.Manager, web *volume.Pod) error {
	d.nas = filepath.Join(filepath.Dir(d.root), "nas-share")
	if err := writeFiles(d.nas, map[string]string{"important.txt": demoNASData}); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	if err := os.Symlink(d.nas, filepath.Join(d.vol, "nas")); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	fmt.Fprintf(d.out, "The pods write files into their volumes; in web's cache volume ($VOL), nas is a symlink\n")
	fmt.Fprintf(d.out, "to a \"NAS\" directory outside it, holding important.txt:\n  VOL=%s\n  NAS=%s\n", d.vol, d.nas)
	if err := d.step("nodevol scan --root $ROOT", exitOK, func(w io.Writer) int { return cli.Run([]string{"scan", "--root", d.root}, w, w) }); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "web is deleted; a teardown that followed the link would delete the NAS's files:")
	m.RemovePod(web.UID)
	start := time.Now()
	if err := d.waitUnmount(m, web); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  RemovePod(web); WaitForUnmount(web), WaitForPodRemoval(web): ok after %s; web's volume (link included) and pod directory are gone\n", since(start))
	return d.intact(filepath.Join(d.nas, "important.txt"), "$NAS/important.txt")
}

// reconstructed waits until the new Manager has put what is on disk into
// its actual state, and prints db's volume.
func (d *demo) reconstructed(m *reconciler.Manager, db *volume.Pod) error {
	select {
	case <-m.Reconstructed():
	case <-d.ctx.Done():
		return d.ctx.Err()
	case <-time.After(demoWait):
		return fmt.Errorf("PROMISE BROKEN: Manager 2 did not finish reconstructing within %s", demoWait)
	}
	vols := m.MountedVolumes(db.UID)
	if len(vols) != 1 || vols[0].InnerName != "data" || vols[0].State != reconciler.StateUncertain {
		return fmt.Errorf("PROMISE BROKEN: Manager 2 reconstructed %s for db; want data uncertain", d.states(m, db))
	}
	why := ""
	if vols[0].LastError != nil {
		why = " (" + vols[0].LastError.Error() + ")"
	}
	fmt.Fprintf(d.out, "  MountedVolumes(db): %s%s\n", d.states(m, db), why)
	problems := "none"
	if ps := m.Problems(); len(ps) > 0 {
		var all []string
		for _, p := range ps {
			all = append(all, d.short().Replace(p.Path+": "+p.Err.Error()))
		}
		problems = strings.Join(all, "; ")
	}
	fmt.Fprintf(d.out, "  Problems(): %s\n", problems)
	fmt.Fprintln(d.out, "  Nothing is torn down before MarkSourcesReady, so db's volume waits for db to be added again.")
	return nil
}

// waitMount waits until every volume of pod p is mounted.
func (d *demo) waitMount(m *reconciler.Manager, p *volume.Pod) error {
	ctx, cancel := context.WithTimeout(d.ctx, demoWait)
	defer cancel()
	if err := m.WaitForMount(ctx, p.UID); err != nil {
		return fmt.Errorf("WaitForMount(%s): %w", p.Name, err)
	}
	return nil
}

// waitUnmount waits until pod p has no volume left, then until the
// Manager has removed its pod directory (WaitForPodRemoval).
func (d *demo) waitUnmount(m *reconciler.Manager, p *volume.Pod) error {
	ctx, cancel := context.WithTimeout(d.ctx, demoWait)
	defer cancel()
	if err := m.WaitForUnmount(ctx, p.UID); err != nil {
		return fmt.Errorf("PROMISE BROKEN: WaitForUnmount(%s): %w", p.Name, err)
	}
	if err := m.WaitForPodRemoval(ctx, p.UID); err != nil {
		return fmt.Errorf("PROMISE BROKEN: %s's volumes are torn down but its pod directory is still there: WaitForPodRemoval: %w", p.Name, err)
	}
	return nil
}

// printVolumes prints the volumes of each pod in the Manager's actual
// state, with the mount of each one that is a mount point.
func (d *demo) printVolumes(m *reconciler.Manager, pods ...*volume.Pod) error {
	var lines [][]string
	for _, p := range pods {
		vols := m.MountedVolumes(p.UID)
		slices.SortFunc(vols, func(a, b reconciler.MountedVolume) int { return strings.Compare(a.InnerName, b.InnerName) })
		if len(vols) != len(p.Volumes) {
			return fmt.Errorf("PROMISE BROKEN: WaitForMount(%s) succeeded with %d of %d volumes in MountedVolumes", p.Name, len(vols), len(p.Volumes))
		}
		for _, v := range vols {
			if v.State != reconciler.StateMounted {
				return fmt.Errorf("PROMISE BROKEN: WaitForMount(%s) succeeded but volume %s is %s", p.Name, v.InnerName, v.State)
			}
			dir, err := d.layout.VolumeDir(p.UID, v.Plugin, v.InnerName)
			if err != nil {
				return err
			}
			lines = append(lines, []string{p.Name, v.InnerName, v.State.String(), mountOf(dir)})
		}
	}
	widths := make([]int, 3)
	for _, l := range lines {
		for i := range widths {
			widths[i] = max(widths[i], len(l[i]))
		}
	}
	for _, l := range lines {
		fmt.Fprintln(d.out, strings.TrimRight(fmt.Sprintf("    %-*s  %-*s  %-*s  %s", widths[0], l[0], widths[1], l[1], widths[2], l[2], l[3]), " "))
	}
	return nil
}

// states says, sorted, what state each volume of p is in: "cache uncertain".
func (d *demo) states(m *reconciler.Manager, p *volume.Pod) string {
	var s []string
	for _, v := range m.MountedVolumes(p.UID) {
		s = append(s, v.InnerName+" "+v.State.String())
	}
	if len(s) == 0 {
		return "none"
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

func (d *demo) dbVol() string {
	dir, _ := d.layout.VolumeDir(demoDBUID, emptydir.PluginName, "data")
	return dir
}

// dbIntact checks that db's file survived the restart and the
// verification.
func (d *demo) dbIntact() error {
	got, err := os.ReadFile(filepath.Join(d.dbVol(), "data.db"))
	if err != nil {
		return fmt.Errorf("PROMISE BROKEN: db lost data.db across the restart: %w", err)
	}
	if string(got) != demoDBData {
		return fmt.Errorf("PROMISE BROKEN: db's data.db changed across the restart: %q, want %q", got, demoDBData)
	}
	fmt.Fprintf(d.out, "  db's data.db still reads %q\n", got)
	return nil
}

// readyMarker is the kubelet's "SetUp completed" marker of a volume.
func (d *demo) readyMarker(uid, name string) string {
	meta, _ := d.layout.PluginVolumeDir(uid, emptydir.PluginName, name)
	return filepath.Join(meta, "ready")
}

// counterValue reads one counter from a registry.
func counterValue(g prometheus.Gatherer, name, label, value string) (float64, error) {
	families, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue(), nil
				}
			}
		}
	}
	return 0, nil
}

// attempts explains n refused teardowns: the first try and the retries
// after each backoff.
func attempts(n int) string {
	if n == 1 {
		return "the first try was refused"
	}
	var backoffs []string
	for i, b := 0, demoInitialBackoff; i < n-1; i, b = i+1, min(2*b, demoMaxBackoff) {
		backoffs = append(backoffs, b.String())
	}
	retries := plural.Of(n-1, "1 retry", fmt.Sprintf("%d retries", n-1))
	return fmt.Sprintf("the first try and %s, after backoffs of %s, were all refused", retries, strings.Join(backoffs, ", "))
}

// since is the time since start, rounded for people.
func since(start time.Time) time.Duration {
	return time.Since(start).Round(time.Millisecond)
}

// short shortens the sandbox's long paths to the names the demo gave them.
func (d *demo) short() *strings.Replacer {
	var pairs []string
	for _, p := range [][2]string{{d.vol, "$VOL"}, {d.nas, "$NAS"}, {d.root, "$ROOT"}} {
		if p[0] != "" {
			pairs = append(pairs, p[0], p[1])
		}
	}
	return strings.NewReplacer(pairs...)
}

// step prints a command line, runs fn (one of the CLI's own commands) with
// its output indented and the sandbox's long paths shortened, and fails
// when it exits with anything but want.
func (d *demo) step(cmdline string, want int, fn func(w io.Writer) int) error {
	fmt.Fprintf(d.out, "$ %s\n", cmdline)
	got := fn(&indentWriter{w: d.out, prefix: "    ", short: d.short()})
	fmt.Fprintf(d.out, "    (exit status %d)\n", got)
	if got != want {
		return fmt.Errorf("PROMISE BROKEN: %q exited with %d, want %d", cmdline, got, want)
	}
	return nil
}

// intact reads the NAS's file back and fails unless it holds exactly what
// was written.
func (d *demo) intact(path, name string) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("PROMISE BROKEN: the NAS lost %s: %w", name, err)
	}
	if string(got) != demoNASData {
		return fmt.Errorf("PROMISE BROKEN: %s changed: %q, want %q", name, got, demoNASData)
	}
	fmt.Fprintf(d.out, "The NAS is intact: %s still reads %q\n", name, got)
	return nil
}

// cleanup stops the Manager still running, unmounts what is still mounted
// (the NAS, and the volumes when the demo stopped early) and removes the
// sandbox with the same boundary-safe RemoveAll the demo is about.
func (d *demo) cleanup() error {
	var errs []error
	if d.stop != nil {
		if err := d.stop(); err != nil {
			errs = append(errs, fmt.Errorf("clean up: %w", err))
		}
	}
	if d.mounted != "" {
		if err := detachNAS(d.mounted); err != nil {
			errs = append(errs, fmt.Errorf("clean up: unmount %s: %w", d.mounted, err))
		}
		d.mounted = ""
	}
	if (d.mountedOnce || d.canMount) && d.root != "" {
		mounts, err := mountPointsUnder(d.root)
		if err != nil {
			errs = append(errs, fmt.Errorf("clean up: %w", err))
		}
		for _, m := range mounts {
			if err := detachNAS(m); err != nil {
				errs = append(errs, fmt.Errorf("clean up: unmount %s: %w", m, err))
			}
		}
	}
	err := mountdetect.RemoveAll(d.tmp)
	if errors.Is(err, mountdetect.ErrUnsupported) && !d.mountedOnce && !d.canMount {
		// Nothing was ever mounted in the sandbox, so os.RemoveAll (which
		// does not follow symlinks either) cannot reach another mount.
		err = os.RemoveAll(d.tmp)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("clean up %s: %w", d.tmp, err))
	}
	return errors.Join(errs...)
}

// writeFiles creates files (and their directories) under dir.
func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return os.MkdirAll(dir, 0o755)
}

// indentWriter prefixes every line written through it, and applies short
// to each write (the commands write whole lines, so a path is never split
// across two writes).
type indentWriter struct {
	w       io.Writer
	prefix  string
	short   *strings.Replacer
	midLine bool
}

func (iw *indentWriter) Write(p []byte) (int, error) {
	var b strings.Builder
	for rest := p; len(rest) > 0; {
		if !iw.midLine {
			b.WriteString(iw.prefix)
		}
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line = rest[:i+1]
		}
		b.Write(line)
		rest = rest[len(line):]
		iw.midLine = line[len(line)-1] != '\n'
	}
	out := b.String()
	if iw.short != nil {
		out = iw.short.Replace(out)
	}
	if _, err := io.WriteString(iw.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}
