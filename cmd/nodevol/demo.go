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

	"github.com/nodevol/nodevol/mountdetect"
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

// demo is one run of "nodevol demo": a sandbox under tmp and whatever it
// mounted there, so that cleanup can undo it.
type demo struct {
	out         io.Writer
	tmp         string
	vol         string // the volume directory, shown as $VOL
	mounted     string // the NAS mount point while mounted
	mountedOnce bool   // something was mounted at some point
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "",
		`Build a throwaway kubelet pod directory under a temporary directory and show
check and rm protecting data that is not the volume's. As root, in a private
mount namespace, a tmpfs "NAS" is mounted inside the volume: check calls it
unsafe, rm refuses and the NAS keeps its data, and once it is unmounted rm
removes the volume. Without root, a symlink inside the volume points to a
"NAS" directory outside it: rm removes the link and the NAS keeps its data.
Everything is removed afterwards.

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
	if iso.canMount {
		err = d.withNAS()
	} else {
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

// volume builds the pod volume directory, laid out as the kubelet lays it
// out, with the pod's own scratch files.
func (d *demo) volume() (string, error) {
	vol := filepath.Join(d.tmp, "kubelet", "pods", demoPodUID, "volumes", "kubernetes.io~empty-dir", "cache")
	err := writeFiles(vol, map[string]string{
		"index.db":         "pod scratch data",
		"tmp/chunk-0001":   "more scratch",
		"tmp/chunk-0002":   "and more",
		"thumbnails/a.png": "not really a png",
	})
	if err != nil {
		return "", fmt.Errorf("build the sandbox: %w", err)
	}
	d.vol = vol
	return vol, nil
}

// withNAS is the demo as root, in a private mount namespace.
func (d *demo) withNAS() error {
	fmt.Fprintln(d.out, "nodevol demo: tearing down a pod's emptyDir while a NAS is mounted inside it")
	fmt.Fprintln(d.out, "(in a private mount namespace: no mount made here can reach the host)")
	fmt.Fprintln(d.out)
	vol, err := d.volume()
	if err != nil {
		return err
	}
	nas := filepath.Join(vol, "nas")
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
	fmt.Fprintf(d.out, "A pod volume, laid out as the kubelet lays it out, with the pod's scratch files:\n  VOL=%s\n", vol)
	fmt.Fprintln(d.out, `A sidecar has mounted a "NAS" (a 1 MiB tmpfs) at $VOL/nas; it holds important.txt.`)
	fmt.Fprintln(d.out, "The pod is deleted. The kubelet would now call os.RemoveAll($VOL), which empties")
	fmt.Fprintln(d.out, "the NAS before failing with EBUSY on its mount point. nodevol instead:")
	fmt.Fprintln(d.out)

	if err := d.step("nodevol check $VOL", exitRefused, func(w io.Writer) int { return runCheck([]string{vol}, w, w) }); err != nil {
		return err
	}
	if err := d.step("nodevol rm $VOL", exitRefused, func(w io.Writer) int { return runRm([]string{vol}, w, w) }); err != nil {
		return err
	}
	if err := d.intact(filepath.Join(nas, "important.txt"), "$VOL/nas/important.txt"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(vol, "index.db")); err != nil {
		return fmt.Errorf("PROMISE BROKEN: a refused rm deleted the pod's own files: %w", err)
	}
	fmt.Fprintln(d.out, "The pod's own files are still there too: a refused rm deletes nothing.")
	fmt.Fprintln(d.out)

	fmt.Fprintln(d.out, "The sidecar is gone; unmount the NAS and tear down again:")
	fmt.Fprintln(d.out, "$ umount $VOL/nas")
	if err := unmountNAS(nas); err != nil {
		return fmt.Errorf("unmount the NAS: %w", err)
	}
	d.mounted = ""
	if err := d.step("nodevol rm $VOL", exitOK, func(w io.Writer) int { return runRm([]string{vol}, w, w) }); err != nil {
		return err
	}
	if _, err := os.Lstat(vol); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("PROMISE BROKEN: rm succeeded but %s is still there (%v)", vol, err)
	}
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "OK: the NAS was never touched, and the volume was removed once nothing else was mounted in it.")
	return nil
}

// withSymlink is the demo without the right to mount: the "NAS" is a
// directory outside the volume that a symlink inside it points to.
func (d *demo) withSymlink(skip string) error {
	fmt.Fprintln(d.out, "nodevol demo: tearing down a pod's emptyDir that links to data outside it")
	fmt.Fprintln(d.out, skip)
	fmt.Fprintln(d.out)
	vol, err := d.volume()
	if err != nil {
		return err
	}
	nas := filepath.Join(d.tmp, "nas-share")
	if err := writeFiles(nas, map[string]string{"important.txt": demoNASData}); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	if err := os.Symlink(nas, filepath.Join(vol, "nas")); err != nil {
		return fmt.Errorf("build the sandbox: %w", err)
	}
	fmt.Fprintf(d.out, "A pod volume, laid out as the kubelet lays it out, with the pod's scratch files:\n  VOL=%s\n", vol)
	fmt.Fprintf(d.out, "$VOL/nas is a symlink to a \"NAS\" directory outside the volume, holding important.txt:\n  NAS=%s\n", nas)
	fmt.Fprintln(d.out, "The pod is deleted; a teardown that followed the link would delete the NAS's files.")
	fmt.Fprintln(d.out)

	if err := d.step("nodevol check $VOL", exitOK, func(w io.Writer) int { return runCheck([]string{vol}, w, w) }); err != nil {
		return err
	}
	if err := d.step("nodevol rm $VOL", exitOK, func(w io.Writer) int { return runRm([]string{vol}, w, w) }); err != nil {
		return err
	}
	if _, err := os.Lstat(vol); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("PROMISE BROKEN: rm succeeded but %s is still there (%v)", vol, err)
	}
	fmt.Fprintln(d.out, "The volume is gone, link included.")
	if err := d.intact(filepath.Join(nas, "important.txt"), "$NAS/important.txt"); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "OK: rm removed the link and never followed it; the data outside the volume survived.")
	return nil
}

// step prints a command line, runs fn (one of the CLI's own commands) with
// its output indented and the volume's long path shortened to $VOL, and
// fails when it exits with anything but want.
func (d *demo) step(cmdline string, want int, fn func(w io.Writer) int) error {
	fmt.Fprintf(d.out, "$ %s\n", cmdline)
	got := fn(&indentWriter{w: d.out, prefix: "    ", short: strings.NewReplacer(d.vol, "$VOL")})
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

// cleanup unmounts what is still mounted and removes the sandbox with the
// same boundary-safe RemoveAll the demo is about.
func (d *demo) cleanup() error {
	var errs []error
	if d.mounted != "" {
		if err := detachNAS(d.mounted); err != nil {
			errs = append(errs, fmt.Errorf("clean up: unmount %s: %w", d.mounted, err))
		}
		d.mounted = ""
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
