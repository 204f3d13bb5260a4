package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

const (
	demoPodUID = "3f6c2a1e-7b4d-4c9a-9e21-5d8f0b6a4c17"
	// demoNASData is what the "NAS" holds; the demo reads it back at the end.
	demoNASData = "invoices 2019-2025: the only copy, kept on the NAS"
)

// isolation says whether the demo may mount in this process.
type isolation struct {
	canMount bool
	// skip explains, when canMount is false, what the demo leaves out.
	skip string
}

// demo is one run of "nodevol demo": a temporary kubelet root under tmp,
// the emptyDir plugin working on it, and whatever was mounted there, so
// that cleanup can undo it.
type demo struct {
	out         io.Writer
	tmp         string
	root        string // the kubelet root, shown as $ROOT
	pod         string // the pod directory, shown as $POD
	vol         string // the Default volume directory, shown as $VOL
	nas         string // the NAS directory outside the volume (no root), shown as $NAS
	plugin      *emptydir.Plugin
	layout      volume.Layout
	mounted     string // the NAS mount point while mounted
	mountedOnce bool   // something was mounted at some point
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "",
		`Build a throwaway kubelet root under a temporary directory, let the emptyDir
plugin set volumes up in it, and show scan and teardown protecting data that
is not the volume's. As root, in a private mount namespace, the pod gets a
Default, a Memory (tmpfs with a sizeLimit) and, when the kernel has 2 MiB
huge pages, a HugePages-2Mi volume, and a tmpfs "NAS" is mounted inside the
Default one: scan calls it unsafe, teardown refuses and the NAS keeps its
data, and once it is unmounted teardown removes every volume. Without root,
a symlink inside a Default volume points to a "NAS" directory outside it:
teardown removes the link and the NAS keeps its data. Everything is removed
afterwards.

Exit status: 0 every promise held, 2 one was broken (or the sandbox could
not be built).`, stderr)
	extra, code := parseArgs(fs, args)
	if code >= 0 {
		return code
	}
	if len(extra) > 0 {
		return usageError(fs, stderr, "demo takes no arguments")
	}
	iso, code, done := isolateDemo(append([]string{"demo"}, args...), stdout, stderr)
	if done {
		return code
	}
	tmp, err := os.MkdirTemp("", "nodevol-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "nodevol demo: %v\n", err)
		return exitError
	}
	d := &demo{out: stdout, tmp: tmp}
	err = d.build()
	if err == nil && iso.canMount {
		err = d.withNAS()
	} else if err == nil {
		err = d.withSymlink(iso.skip)
	}
	if cerr := d.cleanup(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodevol demo: %v\n", err)
		return exitError
	}
	return exitOK
}

// build makes the kubelet root and the emptyDir plugin that works on it.
// The kernel names mount points with symlinks resolved, so the root is
// resolved too: the demo's output then shortens every path the same way.
func (d *demo) build() error {
	tmp, err := filepath.EvalSymlinks(d.tmp)
	if err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	d.root = filepath.Join(tmp, "kubelet")
	if d.layout, err = volume.NewLayout(d.root); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	if d.pod, err = d.layout.PodDir(demoPodUID); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	d.plugin = emptydir.New(volume.NewHost(d.layout, nil, demoAllocatable))
	return nil
}

const (
	demoAllocatable = 1 << 30   // the node's allocatable memory
	demoMemoryLimit = 256 << 20 // the pod's memory limit
	demoSizeLimit   = 64 << 20  // the Memory volume's sizeLimit
	demoHugePage    = 2 << 20
	demoHugePages   = "/sys/kernel/mm/hugepages/hugepages-2048kB"
)

// setUp sets the pod's volumes up with the emptyDir plugin, as the kubelet
// would, and fills the Default one ("cache") with the pod's scratch files.
func (d *demo) setUp(specs []volume.Spec) error {
	pod := &volume.Pod{UID: demoPodUID, Namespace: "default", Name: "web", Volumes: specs,
		MemoryLimit: demoMemoryLimit, HugePages: map[int64]int64{demoHugePage: 8 * demoHugePage}}
	ctx := quietContext()
	for i := range pod.Volumes {
		spec := &pod.Volumes[i]
		m, err := d.plugin.NewMounter(spec, pod)
		if err != nil {
			return fmt.Errorf("set up %s: %w", spec.Name, err)
		}
		if spec.EmptyDir.Medium != volume.StorageMediumDefault {
			d.mountedOnce = true // cleanup must look for mounts
		}
		if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
			return fmt.Errorf("set up %s: %w", spec.Name, err)
		}
		if spec.Name == "cache" {
			d.vol = m.Path()
		}
	}
	return writeFiles(d.vol, map[string]string{
		"index.db":         "pod scratch data",
		"tmp/chunk-0001":   "more scratch",
		"tmp/chunk-0002":   "and more",
		"thumbnails/a.png": "not really a png",
	})
}

// volumeDirs lists the pod's emptyDir volume directories, sorted, as the
// shell would expand $POD/volumes/kubernetes.io~empty-dir/*.
func (d *demo) volumeDirs() ([]string, error) {
	dir := filepath.Dir(d.vol)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range entries {
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	return paths, nil
}

// readyMarker is the kubelet's "SetUp completed" marker of the volume.
func (d *demo) readyMarker(name string) string {
	meta, _ := d.layout.PluginVolumeDir(demoPodUID, emptydir.PluginName, name)
	return filepath.Join(meta, "ready")
}

// withNAS is the demo as root, in a private mount namespace.
func (d *demo) withNAS() error {
	fmt.Fprintln(d.out, "nodevol demo: a pod's emptyDir volumes set up, scanned and torn down while a NAS is mounted inside one")
	fmt.Fprintln(d.out, "(in a private mount namespace: no mount made here can reach the host)")
	fmt.Fprintln(d.out)
	specs := []volume.Spec{
		{Name: "cache", EmptyDir: &volume.EmptyDirSource{}},
		{Name: "scratch", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumMemory, SizeLimit: demoSizeLimit}},
	}
	fmt.Fprintf(d.out, "A temporary kubelet root:\n  ROOT=%s\n", d.root)
	fmt.Fprintf(d.out, "The emptyDir plugin sets up the volumes of pod %s (POD=$ROOT/pods/%s):\n", demoPodUID, demoPodUID)
	fmt.Fprintln(d.out, "  cache    Default                 VOL=$POD/volumes/kubernetes.io~empty-dir/cache")
	fmt.Fprintln(d.out, "  scratch  Memory, sizeLimit 64Mi  (pod memory limit 256Mi, node allocatable 1Gi)")
	if _, err := os.Stat(demoHugePages); err == nil {
		specs = append(specs, volume.Spec{Name: "huge", EmptyDir: &volume.EmptyDirSource{Medium: volume.StorageMediumHugePagesPrefix + "2Mi"}})
		fmt.Fprintln(d.out, "  huge     HugePages-2Mi           (pod requests hugepages-2Mi: 16Mi)")
	} else {
		fmt.Fprintf(d.out, "  (no HugePages-2Mi volume: %s does not exist)\n", demoHugePages)
	}
	if err := d.setUp(specs); err != nil {
		return err
	}
	mounts, err := mountsUnder(d.root)
	if err != nil {
		return fmt.Errorf("list the volumes' mounts: %w", err)
	}
	fmt.Fprintln(d.out, "Their mounts, as /proc/self/mountinfo lists them:")
	for _, m := range mounts {
		fmt.Fprintf(d.out, "  %s\n", d.short().Replace(m))
	}

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
	fmt.Fprintln(d.out, `The pod writes scratch files into $VOL, and a sidecar mounts a "NAS" (a 1 MiB tmpfs)`)
	fmt.Fprintln(d.out, "at $VOL/nas; it holds important.txt.")
	fmt.Fprintln(d.out)
	if err := d.step("nodevol scan --root $ROOT", exitRefused, func(w io.Writer) int { return runScan([]string{"--root", d.root}, w, w) }); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "The pod is deleted. The kubelet's emptyDir teardown would now call os.RemoveAll($VOL),")
	fmt.Fprintln(d.out, "which empties the NAS before failing with EBUSY on its mount point. nodevol instead:")
	if err := d.step("nodevol teardown $VOL", exitRefused, func(w io.Writer) int { return runTeardown([]string{d.vol}, w, w) }); err != nil {
		return err
	}
	if err := d.intact(filepath.Join(nas, "important.txt"), "$VOL/nas/important.txt"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(d.vol, "index.db")); err != nil {
		return fmt.Errorf("PROMISE BROKEN: a refused teardown deleted the pod's own files: %w", err)
	}
	if _, err := os.Stat(d.readyMarker("cache")); err != nil {
		return fmt.Errorf("PROMISE BROKEN: a refused teardown removed the ready marker: %w", err)
	}
	fmt.Fprintln(d.out, "The pod's own files and the ready marker are still there too: a refused teardown changes nothing.")
	fmt.Fprintln(d.out)

	fmt.Fprintln(d.out, "The sidecar is gone; unmount the NAS and tear down every volume of the pod:")
	fmt.Fprintln(d.out, "$ umount $VOL/nas")
	if err := unmountNAS(nas); err != nil {
		return fmt.Errorf("unmount the NAS: %w", err)
	}
	d.mounted = ""
	if err := d.tearDownAll(); err != nil {
		return err
	}
	if err := d.step("nodevol scan --root $ROOT", exitOK, func(w io.Writer) int { return runScan([]string{"--root", d.root}, w, w) }); err != nil {
		return err
	}
	if mounts, err := mountsUnder(d.root); err != nil || len(mounts) > 0 {
		return fmt.Errorf("PROMISE BROKEN: teardown succeeded but mounts are left under $ROOT: %q (%v)", mounts, err)
	}
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "OK: the NAS was never touched, and every volume was torn down (tmpfs and hugetlbfs unmounted)")
	fmt.Fprintln(d.out, "once nothing else was mounted in it; only the empty pod directory is left, for the kubelet.")
	return nil
}

// tearDownAll runs "nodevol teardown" on every volume of the pod and
// checks that each volume and its metadata are gone.
func (d *demo) tearDownAll() error {
	vols, err := d.volumeDirs()
	if err != nil {
		return fmt.Errorf("list the volumes: %w", err)
	}
	if err := d.step("nodevol teardown $POD/volumes/kubernetes.io~empty-dir/*", exitOK, func(w io.Writer) int { return runTeardown(vols, w, w) }); err != nil {
		return err
	}
	for _, v := range vols {
		if _, err := os.Lstat(v); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("PROMISE BROKEN: teardown succeeded but %s is still there (%v)", v, err)
		}
		if marker := d.readyMarker(filepath.Base(v)); exists(marker) {
			return fmt.Errorf("PROMISE BROKEN: teardown succeeded but the ready marker %s is still there", marker)
		}
	}
	return nil
}

// withSymlink is the demo without the right to mount: the "NAS" is a
// directory outside the volume that a symlink inside it points to.
func (d *demo) withSymlink(skip string) error {
	fmt.Fprintln(d.out, "nodevol demo: a pod's emptyDir volume set up, scanned and torn down while it links to data outside it")
	fmt.Fprintln(d.out, skip)
	fmt.Fprintln(d.out)
	fmt.Fprintf(d.out, "A temporary kubelet root:\n  ROOT=%s\n", d.root)
	fmt.Fprintf(d.out, "The emptyDir plugin sets up a Default volume for pod %s (POD=$ROOT/pods/%s):\n", demoPodUID, demoPodUID)
	fmt.Fprintln(d.out, "  cache    Default                 VOL=$POD/volumes/kubernetes.io~empty-dir/cache")
	if err := d.setUp([]volume.Spec{{Name: "cache", EmptyDir: &volume.EmptyDirSource{}}}); err != nil {
		return err
	}
	d.nas = filepath.Join(filepath.Dir(d.root), "nas-share")
	if err := writeFiles(d.nas, map[string]string{"important.txt": demoNASData}); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	if err := os.Symlink(d.nas, filepath.Join(d.vol, "nas")); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	fmt.Fprintln(d.out, "The pod writes scratch files into $VOL, and $VOL/nas is a symlink to a \"NAS\" directory")
	fmt.Fprintf(d.out, "outside the volume, holding important.txt:\n  NAS=%s\n", d.nas)
	fmt.Fprintln(d.out)
	if err := d.step("nodevol scan --root $ROOT", exitOK, func(w io.Writer) int { return runScan([]string{"--root", d.root}, w, w) }); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "The pod is deleted; a teardown that followed the link would delete the NAS's files.")
	if err := d.tearDownAll(); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "The volume is gone, link included.")
	if err := d.intact(filepath.Join(d.nas, "important.txt"), "$NAS/important.txt"); err != nil {
		return err
	}
	if err := d.step("nodevol scan --root $ROOT", exitOK, func(w io.Writer) int { return runScan([]string{"--root", d.root}, w, w) }); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "OK: teardown removed the link and never followed it; the data outside the volume survived.")
	return nil
}

// short shortens the sandbox's long paths to the names the demo gave them.
func (d *demo) short() *strings.Replacer {
	var pairs []string
	for _, p := range [][2]string{{d.vol, "$VOL"}, {d.pod, "$POD"}, {d.nas, "$NAS"}, {d.root, "$ROOT"}} {
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

// cleanup unmounts what is still mounted (the NAS, and the volumes when
// the demo stopped early) and removes the sandbox with the same
// boundary-safe RemoveAll the demo is about.
func (d *demo) cleanup() error {
	var errs []error
	if d.mounted != "" {
		if err := detachNAS(d.mounted); err != nil {
			errs = append(errs, fmt.Errorf("clean up: unmount %s: %w", d.mounted, err))
		}
		d.mounted = ""
	}
	if d.mountedOnce && d.root != "" {
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
	if errors.Is(err, mountdetect.ErrUnsupported) && !d.mountedOnce {
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
