package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/go-logr/logr"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/base/plural"
	"github.com/nodevol/nodevol/internal/executor"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/subpath"
	"github.com/nodevol/nodevol/volume"
)

// teardownResult is what "nodevol teardown" reports about one volume
// directory. The exported fields are the --json output, one object per
// line; their names are part of the CLI's contract.
//
// Medium is what is on disk (Default when nothing is there) and Action
// what the teardown did or, with --dry-run, would do; both are empty when
// the path could not be examined (Error says why).
type teardownResult struct {
	Path    string              `json:"path"`
	PodUID  string              `json:"podUID"`
	Volume  string              `json:"volume"`
	Medium  string              `json:"medium"`
	Action  string              `json:"action"`
	DryRun  bool                `json:"dryRun"`
	Done    bool                `json:"done"`
	Refused bool                `json:"refused"`
	Mounts  []mountdetect.Mount `json:"mounts"` // never nil: [] in JSON
	Reason  string              `json:"reason"`
	// Subpaths are the containers' subPath entries of the volume, which
	// the teardown unmounts (own binds) and removes first.
	Subpaths []subpath.Entry `json:"subpaths"` // never nil: [] in JSON
	// MountNamespace says whether teardown ran in the host's (nsgate.go).
	MountNamespace mountNamespaceJSON `json:"mountNamespace"`
	failureJSON

	plan       emptydir.Plan
	layout     volume.Layout // the parsed volume path and its plugin, for the teardown after the plan
	vp         volume.VolumePath
	plugin     *emptydir.Plugin
	metaExists bool // the metadata directory was there before the teardown
	duringWalk bool // the refusing mounts appeared while removing
	err        error
}

func (r *teardownResult) code() int { return exitCode(r.err, r.Refused) }

func (r *teardownResult) setNamespace(ns mountNamespaceJSON) { r.MountNamespace = ns }

func (r *teardownResult) setErr(err error) {
	r.err = err
	r.record(err)
}

// setPlan copies what a plan says into the report.
func (r *teardownResult) setPlan(p emptydir.Plan) {
	r.plan = p
	r.Medium = emptydir.MediumOf(p.Info).String()
	r.Action = p.Action.String()
	r.Reason = withRemedy(p)
	r.Refused = p.Action == emptydir.ActionRefuse
	r.Mounts = append(r.Mounts[:0], p.Mounts...)
}

// withRemedy is the plan's reason followed by its remedy, if any: the
// "reason" of --json and of scan, which say both in one field. The human
// output of teardown prints the remedy on a line of its own.
func withRemedy(p emptydir.Plan) string {
	if p.Remedy == "" {
		return p.Reason
	}
	return p.Reason + "; " + p.Remedy
}

// emptyDirVolume parses a volume directory given on the command line and
// returns the emptyDir plugin for its kubelet root. Only emptyDir volumes
// are accepted: the teardown of any other plugin's volume (unmounting a
// CSI or NFS volume) belongs to that plugin. The plugin then reaches the
// volume by descriptors from the root, never by this path again.
//
// The path must pass rm's rules (mountdetect.ValidateRemovePath: the same
// paths are refused, for the same reasons), so trailing slashes are
// accepted as rm accepts them: "<volume>/" is the volume directory itself,
// reached like every part of the path without following a symlink. The
// rest must be clean; the parser says what is not ("has a doubled '/'").
func emptyDirVolume(path string) (layout volume.Layout, vp volume.VolumePath, plugin *emptydir.Plugin, err error) {
	if err := refuseDotDot(path); err != nil {
		return layout, vp, nil, err
	}
	if err := mountdetect.ValidateRemovePath(path); err != nil {
		return layout, vp, nil, err
	}
	layout, vp, err = volume.ParseVolumePathAnyRoot(strings.TrimRight(path, "/"))
	if err != nil {
		return layout, vp, nil, err
	}
	if vp.Plugin != emptydir.PluginName {
		return layout, vp, nil, fmt.Errorf("%s is a %s volume, not an emptyDir (%s): nodevol teardown only tears down emptyDir volumes; a %s volume must be unmounted by its own plugin",
			path, vp.Plugin, emptydir.PluginName, vp.Plugin)
	}
	return layout, vp, emptydir.New(volume.NewHost(layout, nil, 0)), nil
}

// planTeardown is teardown --dry-run: what the volume manager's unmount
// operation would do — the subpath check, then emptydir's PlanTearDown —
// changing nothing.
func planTeardown(ctx context.Context, path string) teardownResult {
	r := teardownResult{Path: path, DryRun: true, Mounts: []mountdetect.Mount{}, Subpaths: []subpath.Entry{}}
	layout, vp, plugin, err := emptyDirVolume(path)
	r.PodUID, r.Volume = vp.PodUID, vp.Volume
	if err != nil {
		r.setErr(err)
		return r
	}
	r.layout, r.vp, r.plugin = layout, vp, plugin
	if !r.checkSubpaths(ctx, layout, vp) {
		return r
	}
	r.metaExists = metaExists(layout, vp)
	plan, err := plugin.PlanTearDown(vp.PodUID, vp.Volume, nil)
	if err != nil {
		r.setErr(err)
		return r
	}
	r.setPlan(plan)
	return r
}

// checkSubpaths runs the subpath check and lists the entries, changing
// nothing; false when the teardown stops here (a refusal or an error,
// recorded in r).
func (r *teardownResult) checkSubpaths(ctx context.Context, layout volume.Layout, vp volume.VolumePath) bool {
	entries, err, examErr := subpath.New(layout).Examine(vp.PodUID, vp.Plugin, vp.Volume, nil)
	if examErr != nil {
		r.setErr(fmt.Errorf("check subpath mounts: %w", examErr))
		return false
	}
	var refused *subpath.RefusedError
	if errors.As(err, &refused) && len(refused.Mounts) > 0 {
		r.Refused, r.Action = true, emptydir.ActionRefuse.String()
		r.Reason = "a mount in the volume's subPath tree is not one of the volume's own subPath binds (they are cleaned before the volume, so nothing of the volume is touched)"
		r.Mounts = append(r.Mounts[:0], refused.Mounts...)
		if len(refused.Errs) > 0 {
			r.setErr(errors.Join(refused.Errs...))
		}
		return false
	}
	if err != nil {
		r.setErr(fmt.Errorf("check subpath mounts: %w", err))
		return false
	}
	r.Subpaths = append(r.Subpaths, entries...)
	return true
}

// tearDownVolume tears the volume down with executor.TearDown, the volume
// manager's unmount operation run at once: everything that can refuse is
// asked first, changing nothing (the subpath check, then the teardown's
// check); then the kubelet root's volume-manager lock is taken (locks), so
// that a running reconciler.Manager, or another teardown, is never raced;
// then the containers' subPath bind mounts are cleaned (a failure stops
// here, before anything of the volume is touched), then the plugin's
// TearDown runs. The report is the dry run's (planTeardown), with the
// outcome; a refusal reports the plan the teardown refused with.
func tearDownVolume(ctx context.Context, path string, locks rootLocks) teardownResult {
	r := planTeardown(ctx, path)
	r.DryRun = false
	if r.err != nil || r.Refused {
		return r
	}
	if err := locks.hold(r.layout); err != nil {
		r.setErr(err)
		return r
	}
	err := executor.TearDown(ctx, subpath.New(r.layout), r.plugin, r.vp.PodUID, r.vp.Volume)
	if err == nil {
		r.Done = true
		return r
	}
	var sub *executor.SubpathError
	if errors.As(err, &sub) {
		what := "check subpath mounts"
		if sub.Op == "clean" {
			what = "clean subpath mounts first"
		}
		r.setErr(fmt.Errorf("%s: %w", what, sub.Err))
		return r
	}
	var refused *emptydir.RefusedError
	if !errors.As(err, &refused) {
		r.Refused, r.Mounts = false, r.Mounts[:0]
		r.setErr(err)
		return r
	}
	r.setPlan(refused.Plan)
	r.Refused = true
	r.Action = emptydir.ActionRefuse.String()
	r.Reason = withRemedy(refused.Plan)
	r.Mounts = append(r.Mounts[:0], refused.Plan.Mounts...)
	var crossed *mountdetect.CrossesMountError
	if errors.As(err, &crossed) {
		r.duringWalk = crossed.DuringWalk
	}
	// RemoveAll joins a refusal during the walk with any other failure it
	// met; keep those as errors.
	if rest := withoutCrossesMount(refused.Err); rest != nil {
		r.setErr(rest)
	}
	return r
}

// rootLocks are the volume-manager locks of the kubelet roots teardown
// tears volumes down in, each held from the first volume it tears down
// there to the end of the command: a volume manager running on the root
// (a reconciler.Manager, or another nodevol teardown) would race it on
// the same volumes. A kubelet takes no such lock (see package
// reconciler's documentation).
type rootLocks map[string]*volume.RootLock

func (ls rootLocks) hold(l volume.Layout) error {
	if _, ok := ls[l.Root()]; ok {
		return nil
	}
	lk, err := volume.LockRoot(l, volume.LockVolumeManager, volume.LockOptions{Program: "nodevol teardown"})
	if err != nil {
		return err
	}
	ls[l.Root()] = lk
	return nil
}

func (ls rootLocks) release() {
	for _, lk := range ls {
		lk.Release()
	}
}

// metaExists reports whether the volume's metadata directory exists, only
// to word the report ("its leftover metadata was removed").
func metaExists(layout volume.Layout, vp volume.VolumePath) bool {
	metaDir, err := layout.PluginVolumeDir(vp.PodUID, vp.Plugin, vp.Volume)
	return err == nil && exists(metaDir)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// quietContext is a context whose logger discards everything: the CLI
// reports every outcome itself, so emptydir's log lines would only repeat
// them in another format on stderr.
func quietContext() context.Context {
	return logr.NewContext(context.Background(), logr.Logger{})
}

// teardownHelp is the help of "nodevol teardown", after its usage line.
const teardownHelp = `Tear down each emptyDir volume directory exactly as the emptyDir plugin does,
for example
  /var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>
(absolute, without "." or ".." elements or a doubled "/", trailing slashes
allowed; the kubelet root is what precedes /pods/). Its metadata (the ready
marker) is in <root>/pods/<uid>/plugins/kubernetes.io~empty-dir/.

  nothing there          success; leftover metadata is removed
  Default medium         the directory is removed without crossing a mount
  Memory, HugePages      the tmpfs or hugetlbfs SetUp made (its identity is
                         recorded in nodevol.json) is unmounted, then removed
  a mount beneath it     refused: nothing changes, ready marker included,
                         and every mount is listed
  anything else mounted  refused: a mount SetUp did not record (an NFS share
  on it, or unsure       on the directory, stacked mounts, a volume set up by
                         a stock kubelet), unreadable metadata, or a kernel
                         that cannot tell whether it is a mount point

The containers' subPath bind mounts of the volume are checked first and
unmounted before the volume; a mount in the subPath tree that is not one of
the volume's own binds is refused too. Nothing below the kubelet root is
followed through a symlink.

Volumes of other plugins are not torn down here: their own plugin must
unmount them.

teardown refuses, changing nothing, when this process is not in the host's
mount namespace (a container's: a NAS mounted only in the host's is not seen
from here, and removing the directory it is mounted on would detach it on
the host), or when that cannot be told because PID 1 here is not the host's
init (a container with a PID namespace of its own; --host-proc DIR names
the host's /proc mounted into it). --allow-foreign-mount-namespace lets it
go on. When it cannot be told only because reading PID 1's namespaces takes
root, teardown warns and goes on. --dry-run refuses as teardown would.

Before it changes anything, teardown takes the kubelet root's volume-manager
lock (<root>/nodevol-volume-manager.lock), which a running
reconciler.Manager holds: while another process holds it, nothing is torn
down, and the error names that process. A kubelet takes no such lock.
--dry-run takes none.

Exit status: 0 every volume torn down (or nothing there), 1 some teardown
was refused because of a mount, 2 some path is not an emptyDir volume
directory or could not be torn down (another process holds the root's
lock, for one), teardown was refused because of the mount namespace, or
bad usage.`

func runTeardown(fs *flagSet, args []string, stdout, stderr io.Writer) int {
	dryRun := fs.Bool("dry-run", false, "say what would be done per volume; change nothing")
	asJSON := fs.Bool("json", false, "print one JSON object per path per line")
	nsFlags := addNamespaceFlags(fs.FlagSet, true)
	paths, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(paths) == 0 {
		return usageError(fs, stderr, "no VOLUME_DIR given")
	}
	blank := func(path string) teardownResult {
		return teardownResult{Path: path, DryRun: *dryRun, Mounts: []mountdetect.Mount{}, Subpaths: []subpath.Entry{}}
	}
	ctx := quietContext()
	locks := rootLocks{}
	defer locks.release()
	act := func(path string) teardownResult {
		if *dryRun {
			return planTeardown(ctx, path)
		}
		return tearDownVolume(ctx, path, locks)
	}
	return eachPath("teardown", nsFlags, paths, *dryRun, *asJSON, stdout, stderr, blank, act, writeTeardownHuman)
}

// writeTeardownHuman reports one volume: what was (or would be) done on
// stdout, refusals and errors on stderr, every path and message escaped by
// display.
func writeTeardownHuman(stdout, stderr io.Writer, r *teardownResult) {
	path, reason := display(r.Path), display(r.Reason)
	if r.plan.Remedy != "" {
		reason = display(r.plan.Reason)
	}
	if r.Refused {
		switch {
		case r.DryRun:
			fmt.Fprintf(stderr, "would refuse %s: %s; nothing would change:\n", path, reason)
		case r.duringWalk:
			fmt.Fprintf(stderr, "refused %s: %s; %s left untouched, everything else on the volume's own mount was removed, the ready marker was kept:\n",
				path, reason, plural.Of(len(r.Mounts), "it was", "they were"))
		default:
			fmt.Fprintf(stderr, "refused %s: %s; nothing was changed (the ready marker and metadata are kept):\n", path, reason)
		}
		for _, m := range r.Mounts {
			fmt.Fprintf(stderr, "  %s\n", m.String())
		}
		switch {
		case r.duringWalk:
		case r.plan.Remedy != "":
			fmt.Fprintf(stderr, "%s\n", display(r.plan.Remedy))
		default:
			fmt.Fprintf(stderr, "unmount %s first, then run nodevol teardown again\n", plural.Of(len(r.Mounts), "it", "them"))
		}
	}
	if r.err != nil {
		writeErrors(stderr, "nodevol teardown: ", r.err, "")
	}
	if r.Refused || r.err != nil {
		return
	}
	if n := countMounted(r.Subpaths); n > 0 {
		if r.DryRun {
			fmt.Fprintf(stdout, "would unmount %s of its containers first\n", plural.Count(n, "subPath bind mount"))
		} else {
			fmt.Fprintf(stdout, "unmounted %s of its containers first\n", plural.Count(n, "subPath bind mount"))
		}
	}
	medium := emptydir.MediumOf(r.plan.Info).String()
	switch r.Action {
	case emptydir.ActionNone.String():
		meta := ""
		if r.metaExists {
			meta = "; its leftover metadata was removed"
			if r.DryRun {
				meta = "; its leftover metadata would be removed"
			}
		}
		fmt.Fprintf(stdout, "nothing to tear down: %s does not exist%s\n", path, meta)
	case emptydir.ActionRemove.String():
		if r.DryRun {
			fmt.Fprintf(stdout, "would remove %s (%s)\n", path, reason)
		} else {
			fmt.Fprintf(stdout, "removed %s (%s)\n", path, reason)
		}
	case emptydir.ActionUnmountAndRemove.String():
		fs := r.plan.Info.FSType
		if r.plan.Info.HugePageSize > 0 {
			fs += ", pagesize " + volume.FormatQuantity(r.plan.Info.HugePageSize)
		}
		if r.DryRun {
			fmt.Fprintf(stdout, "would unmount and remove %s (%s medium: %s)\n", path, medium, display(fs))
		} else {
			fmt.Fprintf(stdout, "unmounted and removed %s (%s medium: %s)\n", path, medium, display(fs))
		}
	default:
		fmt.Fprintf(stdout, "torn down %s\n", path)
	}
}

// countMounted counts the subpath entries that are mount points.
func countMounted(es []subpath.Entry) int {
	n := 0
	for _, e := range es {
		if e.MountPoint {
			n++
		}
	}
	return n
}
