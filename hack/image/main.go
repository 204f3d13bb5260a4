// Command image builds nodevol's container images without a registry, a
// Docker daemon or a base image: a static nodevol at /nodevol and the agent
// it runs for "nodevol serve" at /nodevol-agent (or, with -binary
// nodevol-csi, the CSI node plugin at /nodevol-csi) on a base of
// three entries written here (/etc/passwd and /etc/group with root and
// nobody, /tmp with mode 1777), as an OCI image layout tarball, the form
// `ctr -n k8s.io images import` and `docker load` read.
//
//	go run ./hack/image -o nodevol-image.tar [-name REF] [-arch amd64|arm64]
//	go run ./hack/image -o nodevol-csi-image.tar -binary nodevol-csi [-name REF] [-arch amd64|arm64]
//	go run ./hack/image -o FILE [-binary B] -arch amd64,arm64 [-version vX.Y.Z] [-bin-dir DIR]
//
// With more than one -arch the image is multi-platform: an OCI image
// index of one image per architecture (what hack/release builds), and its
// digest is the index's. -version stamps a release version into the
// binary (-ldflags -X of the variable each binary reads it from) and the
// image's labels; -bin-dir keeps the binaries, as DIR/NAME-linux-ARCH.
//
// It prints the image's (manifest) digest on stdout and writes it to
// FILE.digest; a summary goes to stderr. Run it in a checkout of the root
// module. The default name is the one deploy/'s DaemonSet for the binary
// names (ghcr.io/nodevol/nodevol:v0.0.0-dev, and
// ghcr.io/nodevol/nodevol-csi:v0.0.0-dev for deploy/csi), so that the
// image loaded on a node is the one the DaemonSet runs; the version the
// binary reports is in the image's labels.
//
// nodevol is built from ./cmd/nodevol in the root module, and beside it
// nodevol-agent from ./cmd/nodevol-agent ("nodevol serve", the image's
// Cmd, execs it from nodevol's directory); nodevol-csi from
// ./cmd/nodevol-csi in the csi/ module (its own go.mod, with gRPC and the
// CSI spec), so that build needs that module's dependencies. Everything
// else below holds for both.
//
// Reproducible: the same commit built with the same Go gives the same
// bytes. The binary is built as `go build ./cmd/nodevol` is, with its VCS
// stamping (-buildvcs=auto, whatever GOFLAGS says, so that `nodevol
// version` and nodevol_build_info name the revision), plus what makes it
// static and independent of the builder: CGO_ENABLED=0, -trimpath,
// GOAMD64=v1 / GOARM64=v8.0 and GOFLAGS pinned, and a binary carrying any
// other build setting (GOEXPERIMENT, GOFIPS140, ...) refused. Every
// timestamp in the image is the commit's time (the epoch when it is not
// known); see internal/tools/ociimage.
//
// The go command stamps the VCS state only in a repository's main
// checkout, not in a linked git worktree (its .git is a file): there the
// binary says "unknown" and differs from a clone's, the labels still come
// from git, and a warning says so.
package main

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nodevol/nodevol/internal/tools/checkout"
	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// binary is what an image holds and how it is built.
type binary struct {
	name       string   // -binary; the file /<name> in the image, the entrypoint
	moduleDir  string   // the module it is built in, relative to the root module's directory
	modulePath string   // that module's path
	pkg        string   // the main package, relative to moduleDir
	cmd        []string // the image's Cmd: the entrypoint's default arguments
	// also are programs of the same module the image holds beside it, as
	// /<name>, built from their main packages (relative to moduleDir) the
	// same way, with the same -version.
	also       []program
	image      string // the default name: the image deploy/'s DaemonSet for it names
	versionVar string // the variable -version sets (-ldflags -X)
	title      string // org.opencontainers.image.title
	desc       string // org.opencontainers.image.description
}

// program is one more program an image holds.
type program struct {
	name string // the file /<name> in the image
	pkg  string // its main package, relative to the module's directory
}

// binaries are the images hack/image builds, by -binary.
var binaries = map[string]binary{
	"nodevol": {
		name: "nodevol", moduleDir: ".", modulePath: checkout.ModulePath, pkg: "./cmd/nodevol",
		cmd: []string{"serve"}, image: "ghcr.io/nodevol/nodevol:v0.0.0-dev", title: "nodevol",
		// "nodevol serve" execs the agent from nodevol's own directory.
		also:       []program{{name: "nodevol-agent", pkg: "./cmd/nodevol-agent"}},
		versionVar: checkout.ModulePath + "/internal/cli.releaseVersion",
		desc:       "nodevol serve: a read-only node agent that exports which pod volumes a teardown would destroy data on another mount through",
	},
	// The CSI node plugin (deploy/csi): its flags are all in the
	// DaemonSet's args, so no Cmd.
	"nodevol-csi": {
		name: "nodevol-csi", moduleDir: "csi", modulePath: checkout.ModulePath + "/csi", pkg: "./cmd/nodevol-csi",
		image: "ghcr.io/nodevol/nodevol-csi:v0.0.0-dev", title: "nodevol-csi",
		versionVar: "main.releaseVersion",
		desc:       "nodevol-csi: a CSI node plugin serving inline ephemeral volumes with emptyDir semantics, whose teardown never deletes data on another mount",
	},
}

// ErrUnknownBinary is matched by binaryNamed's error for a -binary that
// hack/image does not build.
var ErrUnknownBinary = errors.New("unknown binary")

// binaryNamed is the binary -binary names.
func binaryNamed(name string) (binary, error) {
	b, ok := binaries[name]
	if !ok {
		known := make([]string, 0, len(binaries))
		for k := range binaries {
			known = append(known, k)
		}
		slices.Sort(known)
		return binary{}, fmt.Errorf("-binary %q: %w; want one of %s", name, ErrUnknownBinary, strings.Join(known, ", "))
	}
	return b, nil
}

// The base the binary runs on: root for the agent, nobody for whoever
// runs it unprivileged; no shell, no home.
const (
	passwd = "root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
	group  = "root:x:0:\nnobody:x:65534:\n"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the image layout tarball to `FILE` (and its digest to FILE.digest)")
	name := fs.String("name", "", "the image's name (default: the one deploy/'s DaemonSet for -binary names)")
	arch := fs.String("arch", runtime.GOARCH, "the image's architecture: amd64 or arm64, or both, comma-separated, for a multi-platform image")
	version := fs.String("version", "", "the release `VERSION` (vX.Y.Z) the binary reports and the image's labels say (default: from the build info, or git)")
	binDir := fs.String("bin-dir", "", "also keep the binaries built, as `DIR`/NAME-linux-ARCH")
	binName := fs.String("binary", "nodevol", "what the image runs: nodevol (./cmd/nodevol) or nodevol-csi (./cmd/nodevol-csi in the csi/ module)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: go run ./hack/image -o FILE [-binary nodevol|nodevol-csi] [-name REF] [-arch amd64|arm64|amd64,arm64] [-version vX.Y.Z] [-bin-dir DIR]")
		return 2
	}
	bin, err := binaryNamed(*binName)
	if err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 2
	}
	b, err := build(buildOptions{out: *out, name: *name, arches: strings.Split(*arch, ","), bin: bin,
		version: *version, binDir: *binDir, warn: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "image: %s (%s, linux/%s, %d bytes, %s %s, revision %s)\n",
		b.out, b.name, strings.Join(b.arches, ",linux/"), b.size, bin.name, b.version, b.revision)
	fmt.Fprintln(stdout, b.digest)
	return 0
}

type buildOptions struct {
	out, name string
	arches    []string  // one: an image; more: a multi-platform image (an index)
	bin       binary    // what the image runs; nodevol when zero
	version   string    // -version: stamped into the binary; "" for none
	binDir    string    // -bin-dir: where to keep the binaries; "" to drop them
	warn      io.Writer // warnings
}

// built is what build made.
type built struct {
	out, name, digest  string
	version, revision  string
	arches             []string
	size               int64
	stampedByGoCommand bool
	binaries           map[string]string            // by architecture, in binDir
	also               map[string]map[string]string // by program and architecture, in binDir
}

// goarchLevel is the environment that pins the instruction set level of
// each architecture the image is built for, so that the builder's own
// GOAMD64/GOARM64 cannot change the bytes.
var goarchLevel = map[string]string{
	"amd64": "GOAMD64=v1",
	"arm64": "GOARM64=v8.0",
}

// pinnedEnv is the environment, on top of the builder's, that the go
// command builds the image's binary with, in moduleDir (the binary's
// module). Each variable is set to a non-empty value:
// the go command reads an empty one from the builder's go env file
// (`go env -w`) instead. GOFLAGS is pinned because -ldflags (-s, -X) is
// not recorded in the build info of a -trimpath build, so checkSettings
// could not see it; GOFIPS140=off is the go command's default. The -mod
// mode follows the checkout: -mod=vendor when it has a vendor directory
// (vendor/modules.txt; the build then needs neither the module cache nor
// the network, and records no module sums, so its image differs from a
// module-cache build's), else -mod=readonly.
func pinnedEnv(arch, moduleDir string) []string {
	mod := "-mod=readonly"
	if _, err := os.Stat(filepath.Join(moduleDir, "vendor", "modules.txt")); err == nil {
		mod = "-mod=vendor"
	}
	return []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch, goarchLevel[arch],
		"GOFLAGS=" + mod, "GOFIPS140=off"}
}

// wantSettings are the build settings the image's binary may carry, with
// their values ("" for any: the VCS stamp, and DefaultGODEBUG, which the
// go.mod's go line decides). Anything else (GOEXPERIMENT, -tags, -gcflags,
// ...) came from the builder's environment or go env file and would make
// the image differ from another builder's of the same commit.
func wantSettings(arch string) map[string]string {
	k, v, _ := strings.Cut(goarchLevel[arch], "=")
	return map[string]string{
		"-buildmode": "exe", "-compiler": "gc", "-trimpath": "true", "CGO_ENABLED": "0",
		"GOOS": "linux", "GOARCH": arch, k: v, "DefaultGODEBUG": "",
		"vcs": "git", "vcs.revision": "", "vcs.time": "", "vcs.modified": "",
	}
}

// checkSettings refuses a binary built with a setting outside wantSettings.
func checkSettings(info *buildinfo.BuildInfo, arch string) error {
	name := path.Base(info.Path)
	if name == "." || name == "/" {
		name = "the binary"
	}
	want := wantSettings(arch)
	var bad []string
	for _, s := range info.Settings {
		if v, ok := want[s.Key]; !ok || (v != "" && v != s.Value) {
			bad = append(bad, s.Key+"="+s.Value)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s was built with %s, from the builder's environment or go env file: "+
			"the image would differ from a clean builder's; unset them", name, strings.Join(bad, " "))
	}
	return nil
}

func build(o buildOptions) (*built, error) {
	if len(o.arches) == 0 {
		o.arches = []string{runtime.GOARCH}
	}
	for i, arch := range o.arches {
		if _, ok := goarchLevel[arch]; !ok || slices.Contains(o.arches[:i], arch) {
			return nil, fmt.Errorf("-arch %q: want amd64 or arm64, or both, each once", strings.Join(o.arches, ","))
		}
	}
	if o.version != "" && !validVersion(o.version) {
		return nil, fmt.Errorf("-version %q: want vMAJOR.MINOR.PATCH, with an optional -prerelease", o.version)
	}
	if o.bin.name == "" {
		o.bin = binaries["nodevol"]
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	root, err := checkout.Root(goCmd)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, filepath.FromSlash(o.bin.moduleDir))
	tmp, err := os.MkdirTemp("", "nodevol-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if o.binDir != "" {
		if err := os.MkdirAll(o.binDir, 0o755); err != nil {
			return nil, err
		}
	}
	name := o.name
	if name == "" {
		name = o.bin.image
	}
	var imgs []*ociimage.Image
	var src sourceInfo
	kept := map[string]string{}
	alsoKept := map[string]map[string]string{}
	for _, arch := range o.arches {
		bin := filepath.Join(tmp, o.bin.name+"-linux-"+arch)
		if src, err = buildBinary(goCmd, dir, o.bin.pkg, o.bin.name, bin, arch, o); err != nil {
			return nil, err
		}
		var also []string
		for _, p := range o.bin.also {
			path := filepath.Join(tmp, p.name+"-linux-"+arch)
			psrc, err := buildBinary(goCmd, dir, p.pkg, p.name, path, arch, o)
			if err != nil {
				return nil, err
			}
			if psrc.version != src.version || psrc.revision != src.revision || !psrc.created.Equal(src.created) || psrc.stamped != src.stamped {
				return nil, fmt.Errorf("%s and %s say different sources: %+v, %+v", o.bin.name, p.name, src, psrc)
			}
			also = append(also, path)
		}
		img, err := imageOf(o.bin, bin, also, arch, src)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
		if o.binDir != "" {
			kept[arch] = filepath.Join(o.binDir, filepath.Base(bin))
			if err := copyFile(bin, kept[arch]); err != nil {
				return nil, err
			}
			for i, p := range o.bin.also {
				if alsoKept[p.name] == nil {
					alsoKept[p.name] = map[string]string{}
				}
				alsoKept[p.name][arch] = filepath.Join(o.binDir, filepath.Base(also[i]))
				if err := copyFile(also[i], alsoKept[p.name][arch]); err != nil {
					return nil, err
				}
			}
		}
	}
	if !src.stamped {
		fmt.Fprintf(o.warn, "image: warning: the go command stamped no VCS state into %s (a linked git worktree?): "+
			"its revision in the image says unknown, and the image differs from one built in a clone of the same commit; the labels come from git\n", o.bin.name)
	}
	var desc ociimage.Descriptor
	if len(imgs) == 1 {
		imgs[0].Name = name
		desc, err = ociimage.WriteFile(o.out, imgs[0])
	} else {
		desc, err = ociimage.WriteIndexFile(o.out, name, imgs)
	}
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(o.out+".digest", []byte(desc.Digest+"\n"), 0o644); err != nil {
		return nil, err
	}
	st, err := os.Stat(o.out)
	if err != nil {
		return nil, err
	}
	return &built{
		out: o.out, name: name, digest: desc.Digest, version: src.version, revision: src.revision,
		arches: o.arches, size: st.Size(), stampedByGoCommand: src.stamped, binaries: kept, also: alsoKept,
	}, nil
}

// buildBinary builds the main package pkg of the module in dir, the
// program name, into bin for linux/arch, as the image's binaries are
// built, checks what it was built with, and returns what it says it was
// built from.
func buildBinary(goCmd, dir, pkg, name, bin, arch string, o buildOptions) (sourceInfo, error) {
	args := []string{"build", "-trimpath", "-buildvcs=auto", "-o", bin}
	if o.version != "" {
		args = append(args, "-ldflags=-X "+o.bin.versionVar+"="+o.version)
	}
	cmd := exec.Command(goCmd, append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), pinnedEnv(arch, dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return sourceInfo{}, fmt.Errorf("go build %s for linux/%s (in %s): %w\n%s", pkg, arch, dir, err, out)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return sourceInfo{}, fmt.Errorf("reading the build info of %s: %w", name, err)
	}
	if info.Main.Path != o.bin.modulePath {
		return sourceInfo{}, fmt.Errorf("%s was built in module %q; want %s", name, info.Main.Path, o.bin.modulePath)
	}
	if err := checkSettings(info, arch); err != nil {
		return sourceInfo{}, err
	}
	src, err := sourceOf(info, dir)
	if err != nil {
		return sourceInfo{}, err
	}
	if o.version != "" {
		src.version = o.version
	}
	return src, nil
}

// imageOf is the image of the binary at path, with the programs b.also
// at also (in their order), built for arch from src.
func imageOf(b binary, path string, also []string, arch string, src sourceInfo) (*ociimage.Image, error) {
	bin, err := ociimage.FileFrom(path, "/"+b.name, 0o755)
	if err != nil {
		return nil, err
	}
	entries := []ociimage.Entry{bin}
	for i, p := range b.also {
		e, err := ociimage.FileFrom(also[i], "/"+p.name, 0o755)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	meta := map[string]string{
		"org.opencontainers.image.title":       b.title,
		"org.opencontainers.image.description": b.desc,
		"org.opencontainers.image.source":      checkout.Source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     src.version,
		"org.opencontainers.image.revision":    src.revision,
		"org.opencontainers.image.created":     src.created.Format(time.RFC3339),
	}
	return &ociimage.Image{
		Platform: ociimage.Platform{Architecture: arch, OS: "linux"},
		Created:  src.created,
		Config: ociimage.Config{
			Entrypoint: []string{"/" + b.name},
			Cmd:        b.cmd,
			WorkingDir: "/",
			Labels:     meta,
		},
		Annotations: meta,
		Entries: append(entries,
			ociimage.Entry{Path: "/etc/passwd", Type: ociimage.File, Mode: 0o644, Data: []byte(passwd)},
			ociimage.Entry{Path: "/etc/group", Type: ociimage.File, Mode: 0o644, Data: []byte(group)},
			ociimage.Entry{Path: "/tmp", Type: ociimage.Dir, Mode: 0o777 | os.ModeSticky},
		),
	}, nil
}

// validVersion is whether v is a release version: vMAJOR.MINOR.PATCH with
// an optional -prerelease of letters, digits, '.' and '-' (semver, without
// build metadata, which a Go module version cannot carry).
func validVersion(v string) bool {
	core, pre, hasPre := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	if !strings.HasPrefix(v, "v") || (hasPre && pre == "") {
		return false
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return strings.Trim(pre, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == ""
}

// copyFile copies the file from to the new file to, mode 0755.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// sourceInfo is what the image says it was built from.
type sourceInfo struct {
	version, revision string
	created           time.Time // the commit's time; the epoch when unknown
	stamped           bool      // the go command stamped it into the binary
}

// sourceOf reads the version and VCS state from the binary's build info;
// when the go command stamped none, it asks git in dir for the same
// facts, and says "unknown" for what git cannot tell either.
func sourceOf(info *buildinfo.BuildInfo, dir string) (sourceInfo, error) {
	src := sourceInfo{version: info.Main.Version, created: ociimage.Epoch}
	var vcsTime string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			src.revision, src.stamped = s.Value, true
		case "vcs.time":
			vcsTime = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if !src.stamped {
		rev, t, dirty, err := gitState(dir)
		if err != nil {
			src.revision = "unknown"
			if src.version == "" || src.version == "(devel)" {
				src.version = "dev"
			}
			return src, nil
		}
		src.revision, vcsTime, modified = rev, t, dirty
	}
	if vcsTime != "" {
		t, err := time.Parse(time.RFC3339, vcsTime)
		if err != nil {
			return sourceInfo{}, fmt.Errorf("vcs.time %q: %w", vcsTime, err)
		}
		src.created = t.UTC()
	}
	if src.version == "" || src.version == "(devel)" {
		// The go command's pseudo-version for a module without tags.
		short := src.revision
		if len(short) > 12 {
			short = short[:12]
		}
		src.version = "v0.0.0-" + src.created.Format("20060102150405") + "-" + short
		if modified {
			src.version += "+dirty"
		}
	}
	return src, nil
}

// gitState is HEAD's revision and committer time (RFC 3339, UTC) and
// whether the work tree differs from it, as the go command stamps them.
func gitState(dir string) (revision, commitTime string, modified bool, err error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return out.String(), nil
	}
	head, err := git("-c", "log.showsignature=false", "log", "-1", "--format=%H:%ct")
	if err != nil {
		return "", "", false, err
	}
	rev, secs, ok := strings.Cut(strings.TrimSpace(head), ":")
	var unix int64
	if _, serr := fmt.Sscan(secs, &unix); !ok || serr != nil {
		return "", "", false, fmt.Errorf("git log: unexpected output %q", head)
	}
	status, err := git("status", "--porcelain")
	if err != nil {
		return "", "", false, err
	}
	return rev, time.Unix(unix, 0).UTC().Format(time.RFC3339), status != "", nil
}
