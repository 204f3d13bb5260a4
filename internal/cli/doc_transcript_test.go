//go:build linux

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/mountdetect"
	"github.com/nodevol/nodevol/volume"
)

var updateDocs = flag.Bool("update", false, "TestDocTranscripts: rewrite the docs' console blocks from the CLI's real output")

// transcriptDocs are the files whose ```console blocks TestDocTranscripts
// runs, relative to this package.
var transcriptDocs = []string{"../../docs/cli.md", "../../README.md"}

// The pods of the docs' scenario.
const (
	docUID      = "8a3f0c52-1d4e-4b7a-9c21-6e5d2f1a7b90"
	docUID2     = "c0ffee00-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	docLeftover = "5d1c9e2a-0b3f-4c7d-8e6a-1f2b3c4d5e6f"
)

// TestDocTranscripts runs every ```console block of the docs and compares
// it with what the CLI really prints, so the docs cannot drift from the
// code. With -update it rewrites the blocks from the real output instead:
//
//	go test ./internal/cli -run TestDocTranscripts -update
//
// Each block follows a marker line naming the scenario it runs in, built
// afresh for the block:
//
//	<!-- transcript: node -->            the scratch node of docNode
//	<!-- transcript: node foreign -->    the same, nodevol run as it is (below)
//	<!-- transcript: subpaths -->        docSubpaths
//	<!-- transcript: demo -->            nodevol-demo
//	<!-- transcript: version -->         nodevol version
//	<!-- transcript: unchecked: WHY -->  not run, for the reason given
//
// A block without a marker fails the test. In a block, a line beginning
// "$ " or "# " is a command and the lines up to the next are its output
// (stdout and stderr as one stream, in the order written), except that
// everything after "nodevol-demo" is the demo's output (it prints "$ "
// lines of its own). Commands: "nodevol ARGS" runs the binary, with $V,
// $P and $ROOT replaced by the scenario's paths; "echo $?" prints the
// previous command's exit status; "umount PATH..." unmounts.
//
// The tests run in a private mount namespace (mounttest.Main), where
// check and scan warn that it is not the host's and rm and teardown
// refuse. The docs read as a session on a node in the host's namespace,
// so, except in a "foreign" block, rm and teardown get
// --allow-foreign-mount-namespace and exactly the warning line and the
// "mountNamespace" JSON field are dropped from the output; docs/cli.md
// says so. The only other substitutions (docNormalize) replace values
// that vary from run to run.
func TestDocTranscripts(t *testing.T) {
	mounttest.RequireMounts(t)
	if _, err := os.Stat(hugePages2Mi); err != nil {
		t.Skipf("skipping: the docs show a HugePages-2Mi volume, and this machine has no 2 MiB huge pages: %v", err)
	}
	for _, f := range kernelFeatures() {
		if f.Available != featureYes {
			t.Skipf("skipping: the docs show a kernel with every feature nodevol uses, and this one lacks %s", f.About)
		}
	}
	bins := docBinaries{nodevol: buildBinary(t), demo: buildProgram(t, demoPkg)}
	for _, file := range transcriptDocs {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := consoleBlocks(string(src))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var out strings.Builder
		last := 0
		for _, b := range blocks {
			out.WriteString(string(src[last:b.start]))
			last = b.end
			name := fmt.Sprintf("%s:%d:%s", filepath.Base(file), b.line, b.scenario)
			got := b.body
			t.Run(name, func(t *testing.T) {
				if b.unchecked != "" {
					t.Skipf("skipping: marked unchecked: %s", b.unchecked)
				}
				got = runTranscript(t, bins, b)
				if got != b.body && !*updateDocs {
					t.Errorf("%s:%d: the console block differs from the CLI's real output (go test ./internal/cli -run TestDocTranscripts -update rewrites it)\n--- docs\n%s--- real\n%s%s",
						file, b.line, b.body, got, firstDifference(b.body, got))
				}
			})
			out.WriteString(got)
		}
		out.WriteString(string(src[last:]))
		if *updateDocs && out.String() != string(src) {
			if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote %s", file)
		}
	}
}

// consoleBlock is one ```console block: its body (between the fences) at
// src[start:end], and its marker.
type consoleBlock struct {
	line       int // of the body's first line, 1-based
	start, end int
	body       string
	scenario   string
	foreign    bool
	unchecked  string // why, when marked unchecked
}

var transcriptMarker = regexp.MustCompile(`^<!-- transcript: (.*) -->$`)

// consoleBlocks finds the ```console blocks of a Markdown file and their
// markers.
func consoleBlocks(src string) ([]consoleBlock, error) {
	var blocks []consoleBlock
	var prev string // the last non-blank line before the current one
	var open *consoleBlock
	off := 0
	for n, line := range strings.SplitAfter(src, "\n") {
		text := strings.TrimSuffix(line, "\n")
		switch {
		case open != nil && text == "```":
			open.end = off
			open.body = src[open.start:open.end]
			blocks = append(blocks, *open)
			open = nil
		case open == nil && text == "```console":
			m := transcriptMarker.FindStringSubmatch(prev)
			if m == nil {
				return nil, fmt.Errorf("line %d: a console block without a <!-- transcript: SCENARIO --> marker on the line before", n+1)
			}
			b := consoleBlock{line: n + 2, start: off + len(line)}
			if why, ok := strings.CutPrefix(m[1], "unchecked: "); ok {
				b.unchecked = why
			} else {
				fields := strings.Fields(m[1])
				b.scenario = fields[0]
				for _, opt := range fields[1:] {
					if opt != "foreign" {
						return nil, fmt.Errorf("line %d: unknown transcript option %q", n+1, opt)
					}
					b.foreign = true
				}
				switch b.scenario {
				case "node", "subpaths", "demo", "version":
				default:
					return nil, fmt.Errorf("line %d: unknown transcript scenario %q", n+1, b.scenario)
				}
			}
			open = &b
		}
		if strings.TrimSpace(text) != "" {
			prev = text
		}
		off += len(line)
	}
	if open != nil {
		return nil, fmt.Errorf("line %d: an unterminated console block", open.line-1)
	}
	return blocks, nil
}

// docScene is the scratch node a block runs in: the paths the docs call
// $V, $P and $ROOT.
type docScene struct {
	vars [][2]string // name, path; the longest path first
}

func (s *docScene) expand(arg string) string {
	for _, v := range s.vars {
		arg = strings.ReplaceAll(arg, "$"+v[0], v[1])
	}
	return arg
}

// docBase is the scratch filesystem of a scenario: a loop-mounted ext4
// image, so that the docs show the filesystem a node's kubelet root is
// usually on, whatever /tmp is here.
func docBase(t *testing.T) *kubelet {
	t.Helper()
	return newKubelet(t, mounttest.LoopFS(t, "ext4", 64<<20, "", "-q", "-F"))
}

func (k *kubelet) scene(t *testing.T) *docScene {
	t.Helper()
	v := filepath.Dir(k.dir(t, docUID, emptydir.PluginName, "x"))
	p := filepath.Join(k.root, "pods", docUID2)
	return &docScene{vars: [][2]string{{"V", v}, {"P", p}, {"ROOT", k.root}}}
}

// docNode is the node of the docs: pod docUID with the emptyDir volumes
// cache (Default, a "NAS" tmpfs from nas:/export mounted at cache/shared
// and a bind-mounted file at cache/hostname), scratch (Default), memcache
// (Memory) and huge (HugePages), all set up by the emptyDir plugin; pod
// docUID2 with a CSI volume (a bind mount on its target directory
// <volume>/mount standing in for the driver's)
// and a secret volume (a tmpfs); an unparsable plugin directory and a
// file among the pods (problems for scan) and a pod directory without
// volumes (a leftover).
func docNode(t *testing.T) *docScene {
	k := docBase(t)
	cache := k.setUp(t, docUID, "cache", volume.EmptyDirSource{})
	mounttest.Build(t, cache, "file index.db "+strings.Repeat("x", 10000), "dir tmp")
	mounttest.Build(t, filepath.Dir(k.root), "file etc/hostname web-0", "file csi/staging/data.bin x")
	mounttest.Mount(t, "nas:/export", filepath.Join(cache, "shared"), "tmpfs", 0, "size=1m")
	mounttest.Build(t, filepath.Join(cache, "shared"), "file invoices.pdf the only copy")
	mounttest.Bind(t, filepath.Join(filepath.Dir(k.root), "etc/hostname"), filepath.Join(cache, "hostname"))
	k.setUp(t, docUID, "scratch", volume.EmptyDirSource{})
	k.setUp(t, docUID, "memcache", volume.EmptyDirSource{Medium: volume.StorageMediumMemory, SizeLimit: 64 << 20})
	k.setUp(t, docUID, "huge", volume.EmptyDirSource{Medium: volume.StorageMediumHugePages})
	// As the kubelet lays a CSI volume out: vol_data.json beside the
	// target directory mount, which the driver mounts.
	csi := k.dir(t, docUID2, "kubernetes.io/csi", "pvc-3e1f2a3b")
	mounttest.Build(t, csi, `file vol_data.json {"driverName":"ebs.csi.aws.com"}`, "dir mount")
	mounttest.Bind(t, filepath.Join(filepath.Dir(k.root), "csi/staging"), filepath.Join(csi, "mount"))
	secret := k.dir(t, docUID2, "kubernetes.io/secret", "token")
	mounttest.Tmpfs(t, secret, "size=64k")
	mounttest.Build(t, secret, "file token x")
	mounttest.Build(t, filepath.Join(k.root, "pods"),
		"dir "+docUID2+"/volumes/kubernetes.io~csi~x",
		"file core.4242 x",
		"dir "+docLeftover+"/plugins",
	)
	return k.scene(t)
}

// docSubpaths is a pod whose container app mounts data/logs (index 0) and
// the file hostname (index 1) of its volume cache with subPath, as the
// kubelet does, and whose sidecar/1 entry is left from an earlier start.
func docSubpaths(t *testing.T) *docScene {
	k := docBase(t)
	cache := k.setUp(t, docUID, "cache", volume.EmptyDirSource{})
	mounttest.Build(t, cache, "dir data/logs", "file hostname web-0")
	k.setUp(t, docUID, "scratch", volume.EmptyDirSource{})
	sub, err := k.layout.VolumeSubpathsDir(docUID, "cache")
	if err != nil {
		t.Fatal(err)
	}
	mounttest.Bind(t, filepath.Join(cache, "data/logs"), filepath.Join(sub, "app/0"))
	mounttest.Bind(t, filepath.Join(cache, "hostname"), filepath.Join(sub, "app/1"))
	mounttest.Build(t, sub, "dir sidecar/1")
	return k.scene(t)
}

// runTranscript runs a block's commands in a fresh scenario and returns
// the block as they really print it.
// docBinaries are the commands the docs run.
type docBinaries struct{ nodevol, demo binary }

func runTranscript(t *testing.T, bins docBinaries, b consoleBlock) string {
	var scene *docScene
	switch b.scenario {
	case "node":
		scene = docNode(t)
	case "subpaths":
		scene = docSubpaths(t)
	default:
		scene = &docScene{}
	}
	var out strings.Builder
	status := 0
	for _, cmd := range transcriptCommands(b.body) {
		out.WriteString(cmd + "\n")
		prompt, line := cmd[:2], cmd[2:]
		args := strings.Fields(line)
		switch {
		case line == "echo $?":
			fmt.Fprintf(&out, "%d\n", status)
		case args[0] == "umount":
			for _, a := range args[1:] {
				if err := unix.Unmount(scene.expand(a), 0); err != nil {
					t.Fatalf("%s: %v", cmd, err)
				}
			}
			status = 0
		case args[0] == "nodevol":
			var r string
			r, status = runDocCommand(t, bins.nodevol, scene, b.foreign, args[1:])
			out.WriteString(r)
		case args[0] == "nodevol-demo":
			var r string
			r, status = runDocCommand(t, bins.demo, scene, b.foreign, args[1:])
			out.WriteString(r)
		default:
			t.Fatalf("%q: a command the transcript test cannot run (%snodevol ..., $ nodevol-demo, $ echo $?, $ umount PATH...)", cmd, prompt)
		}
	}
	return out.String()
}

// transcriptCommands are the command lines of a block.
func transcriptCommands(body string) []string {
	var cmds []string
	for line := range strings.Lines(body) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, "$ ") || strings.HasPrefix(line, "# ") {
			cmds = append(cmds, line)
			if strings.HasPrefix(line[2:], "nodevol-demo") {
				break
			}
		}
	}
	return cmds
}

// runDocCommand runs bin (nodevol or nodevol-demo) with args in the
// scenario, as the docs show it: its output normalized (docNormalize) and
// its exit status.
func runDocCommand(t *testing.T, bin binary, scene *docScene, foreign bool, args []string) (string, int) {
	t.Helper()
	for i, a := range args {
		args[i] = scene.expand(a)
	}
	sub := "demo" // nodevol-demo, which takes no arguments
	if len(args) > 0 {
		sub = args[0]
	}
	if !foreign && (sub == "rm" || sub == "teardown") {
		args = append([]string{sub, allowForeign}, args[1:]...)
	}
	cmd := exec.Command(bin.path, args...)
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf // one pipe: the order the lines were written in
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		code = exit.ExitCode()
	default:
		t.Fatalf("%s %q: %v\n%s", filepath.Base(bin.path), args, err, buf.String())
	}
	out := buf.String()
	t.Logf("%s %q: exit %d\n%s", filepath.Base(bin.path), args, code, out)
	if !foreign {
		out = dropNamespace(t, sub, out)
	}
	for _, v := range scene.vars {
		out = strings.ReplaceAll(out, v[1], "$"+v[0])
	}
	switch sub {
	case "demo":
		out = strings.ReplaceAll(out, tmp, "/tmp")
	case "version":
		// The machine's Go and kernel releases.
		out = strings.ReplaceAll(out, " "+runtime.Version()+"\n", " $GOVERSION\n")
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			t.Fatal(err)
		}
		out = strings.ReplaceAll(out, " "+unix.ByteSliceToString(u.Release[:])+"\n", " $KERNEL\n")
	}
	return docNormalize(out), code
}

// dropNamespace removes from out exactly what nodevol adds because the
// tests run in a private mount namespace: the warning line of check and
// scan, and the "mountNamespace" field of --json results, which must
// describe this namespace.
func dropNamespace(t *testing.T, sub, out string) string {
	t.Helper()
	if w := namespaceWarning(sub); w != "" {
		out = strings.ReplaceAll(out, w, "")
	}
	ns := mountdetect.CheckMountNamespace()
	if ns.State != mountdetect.MountNamespaceHost {
		// scan's line names the root and its mount.
		out = regexp.MustCompile(`(?m)^nodevol scan: (warning|note): `+regexp.QuoteMeta(ns.String())+`, .*\n`).ReplaceAllString(out, "")
	}
	visible := false
	for _, f := range []mountNamespaceJSON{{State: ns.State, Reason: ns.String()}, {State: ns.State, Reason: ns.String(), HostMountsVisible: &visible}} {
		field, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		out = strings.ReplaceAll(out, `,"mountNamespace":`+string(field), "")
	}
	return out
}

// docSubstitutions are the values that vary from run to run and are
// replaced in what the docs show; nothing else is (no verdict, exit status
// or error text).
var docSubstitutions = []struct {
	re   *regexp.Regexp
	repl string
}{
	// The loop device of the scratch filesystem.
	{regexp.MustCompile(`/dev/loop\d+`), "/dev/loop0"},
	// The random suffixes of the demo's temporary directories.
	{regexp.MustCompile(`nodevol-demo-(ns-)?\d+`), "nodevol-demo-${1}N"},
	// How long the demo waited for the Manager.
	{regexp.MustCompile(`ok after \d+ms`), "ok after Nms"},
	// How many of the demo's teardown tries fit in its 1s wait depends on
	// the machine's speed; TestCLI checks the count (at least 2, the
	// retries one fewer).
	{regexp.MustCompile(`= \d+: the first try and \d+ retries, after backoffs of [0-9ms, ]+, were all refused`),
		"= N: the first try and N-1 retries, after backoffs of 100ms, 200ms, 400ms..., were all refused"},
}

// docNormalize applies docSubstitutions, and writes the number of a
// private mount namespace (new on every run: the test's, the demo's) as
// $MNTNS. The host's namespace keeps its number.
func docNormalize(out string) string {
	for _, s := range docSubstitutions {
		out = s.re.ReplaceAllString(out, s.repl)
	}
	host := mountdetect.CheckMountNamespace().Host.String()
	return regexp.MustCompile(`mnt:\[\d+\]`).ReplaceAllStringFunc(out, func(m string) string {
		if m == host {
			return m
		}
		return "mnt:[$MNTNS]"
	})
}

// firstDifference says where got first differs from want.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range min(len(w), len(g)) {
		if w[i] != g[i] {
			return "first difference, line " + strconv.Itoa(i+1) + " of the block:\n  docs: " + w[i] + "\n  real: " + g[i] + "\n"
		}
	}
	return "one is a prefix of the other\n"
}
