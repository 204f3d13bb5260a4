package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/tools/checkout"
	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// TestBuildReproducible builds the image twice, as `go run ./hack/image`
// does, into two files: the bytes and the digests are the same, and the
// image holds a static nodevol for the asked architecture, the base, the
// process to run and the labels. The second build is mostly the go
// command's cache: it tests that nothing of the build host or the moment
// reaches the image; Go's own toolchain reproducibility is Go's promise.
// The second build runs with a builder's GOFLAGS that would change the
// binary (-ldflags=-s strips it; the build info of a -trimpath build does
// not record -ldflags), which must not reach the image.
// It builds for the host's architecture, as .ci/run's image step does
// next, so that CI compiles nodevol this way once (a cold build takes a
// minute; -arch arm64 would be another cold build).
func TestBuildReproducible(t *testing.T) {
	dir := t.TempDir()
	var digests []string
	var tars [][]byte
	for _, name := range []string{"a.tar", "b.tar"} {
		out := filepath.Join(dir, name)
		if name == "b.tar" {
			t.Setenv("GOFLAGS", "-ldflags=-s")
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"-o", out}, &stdout, &stderr); code != 0 {
			if strings.Contains(stderr.String(), "error obtaining VCS status") {
				t.Skipf("skipping: the go command cannot read this checkout's VCS state (another user's checkout?):\n%s", stderr.String())
			}
			t.Fatalf("run(-o %s) = %d; stderr:\n%s", out, code, stderr.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		d, err := os.ReadFile(out + ".digest")
		if err != nil {
			t.Fatal(err)
		}
		l, err := ociimage.InspectFile(out)
		if err != nil {
			t.Fatalf("InspectFile(%q) = %v", out, err)
		}
		if got := strings.TrimSpace(stdout.String()); got+"\n" != string(d) || got != l.Index.Digest {
			t.Errorf("stdout %q, %s.digest %q: want the manifest's digest, the same", got, name, d)
		}
		tars, digests = append(tars, b), append(digests, string(d))
	}
	if !bytes.Equal(tars[0], tars[1]) || digests[0] != digests[1] {
		t.Fatalf("two builds of the same commit differ: %d bytes %s, %d bytes %s", len(tars[0]), digests[0], len(tars[1]), digests[1])
	}

	l, err := ociimage.InspectFile(filepath.Join(dir, "a.tar"))
	if err != nil {
		t.Fatalf("InspectFile() = %v", err)
	}
	if l.Config.Architecture != runtime.GOARCH || l.Config.OS != "linux" {
		t.Errorf("platform %+v; want linux/%s", l.Config.Platform, runtime.GOARCH)
	}
	if !slices.Equal(l.Config.Config.Entrypoint, []string{"/nodevol"}) || !slices.Equal(l.Config.Config.Cmd, []string{"serve"}) {
		t.Errorf("config %+v; want entrypoint [/nodevol], cmd [serve]", l.Config.Config)
	}
	if name, want := l.Index.Annotations[ociimage.AnnotationImageName], binaries["nodevol"].image; name != want {
		t.Errorf("image name %q; want %s, the DaemonSet's", name, want)
	}
	for _, k := range []string{"source", "revision", "version", "created"} {
		key := "org.opencontainers.image." + k
		if l.Manifest.Annotations[key] == "" || l.Config.Config.Labels[key] != l.Manifest.Annotations[key] {
			t.Errorf("%s: annotation %q, label %q; want the same, not empty", key, l.Manifest.Annotations[key], l.Config.Config.Labels[key])
		}
	}
	if got := l.Manifest.Annotations["org.opencontainers.image.created"]; got != l.Config.Created {
		t.Errorf("created annotation %q, config created %q; want the same", got, l.Config.Created)
	}

	files := map[string]ociimage.LayerFile{}
	for _, f := range l.Layer {
		files[f.Header.Name] = f
	}
	if f := files["tmp/"]; f.Header == nil || f.Header.Mode != 0o1777 {
		t.Errorf("tmp/ = %+v; want a directory, mode 1777", f.Header)
	}
	if f := files["etc/passwd"]; f.Header == nil || !strings.Contains(string(f.Data), "root:x:0:0:") || !strings.Contains(string(f.Data), "nobody:x:65534:65534:") {
		t.Errorf("etc/passwd = %q; want root and nobody", f.Data)
	}
	if f := files["etc/group"]; f.Header == nil || !strings.Contains(string(f.Data), "root:x:0:") {
		t.Errorf("etc/group = %q; want root", f.Data)
	}
	for _, name := range []string{"nodevol", "nodevol-agent"} {
		staticFor(t, files, name, runtime.GOARCH)
	}
	bin := files["nodevol"]
	binPath := filepath.Join(dir, "nodevol")
	if err := os.WriteFile(binPath, bin.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(binPath)
	if err != nil {
		t.Fatalf("buildinfo.ReadFile() = %v", err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" || settings["GOOS"] != "linux" {
		t.Errorf("build settings %v; want CGO_ENABLED=0, -trimpath=true, GOOS=linux", settings)
	}
	if rev, ok := settings["vcs.revision"]; ok && rev != l.Manifest.Annotations["org.opencontainers.image.revision"] {
		t.Errorf("binary stamped with revision %s, image labelled %s", rev, l.Manifest.Annotations["org.opencontainers.image.revision"])
	}
	t.Run("runs", func(t *testing.T) { runsInImage(t, l) })
}

func TestSourceOfStamped(t *testing.T) {
	info := &buildinfo.BuildInfo{
		Main: debug.Module{Path: checkout.ModulePath, Version: "v0.0.0-20261123183751-c2cf21255ef4+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "c2cf21255ef444cd523b1321194c39ba42f68976"},
			{Key: "vcs.time", Value: "2026-11-23T18:37:51Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	src, err := sourceOf(info, t.TempDir())
	if err != nil {
		t.Fatalf("sourceOf() = %v", err)
	}
	if !src.stamped || src.revision != "c2cf21255ef444cd523b1321194c39ba42f68976" || src.version != info.Main.Version ||
		src.created.Format("2006-01-02T15:04:05Z07:00") != "2026-11-23T18:37:51Z" {
		t.Errorf("sourceOf() = %+v; want the stamped revision, version and time", src)
	}
}

// A build with no stamp outside a checkout: the version is "dev", the
// revision unknown, the time the epoch: nothing is guessed.
func TestSourceOfNothingKnown(t *testing.T) {
	info := &buildinfo.BuildInfo{Main: debug.Module{Path: checkout.ModulePath, Version: "(devel)"}}
	src, err := sourceOf(info, t.TempDir())
	if err != nil {
		t.Fatalf("sourceOf() = %v", err)
	}
	if src.stamped || src.revision != "unknown" || src.version != "dev" || !src.created.Equal(ociimage.Epoch) {
		t.Errorf("sourceOf() = %+v; want version dev, revision unknown, the epoch", src)
	}
}

// A build setting the builder's environment or go env file adds (and
// pinnedEnv cannot mask) is refused, not written into an image that
// differs from every other builder's.
func TestCheckSettings(t *testing.T) {
	clean := []debug.BuildSetting{
		{Key: "-buildmode", Value: "exe"}, {Key: "-compiler", Value: "gc"}, {Key: "-trimpath", Value: "true"},
		{Key: "CGO_ENABLED", Value: "0"}, {Key: "GOARCH", Value: "amd64"}, {Key: "GOOS", Value: "linux"},
		{Key: "GOAMD64", Value: "v1"}, {Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "142ae4545d6e7f76a1aa8b1d6d6ed90a3a398a24"},
		{Key: "vcs.time", Value: "2026-11-23T19:41:30Z"}, {Key: "vcs.modified", Value: "false"},
	}
	if err := checkSettings(&buildinfo.BuildInfo{Settings: clean}, "amd64"); err != nil {
		t.Errorf("checkSettings(a plain build) = %v; want nil", err)
	}
	for _, s := range []debug.BuildSetting{
		{Key: "GOEXPERIMENT", Value: "nogreenteagc"},
		{Key: "GOFIPS140", Value: "v1.0.0-c2097c7c"},
		{Key: "-tags", Value: "netgo"},
		{Key: "-gcflags", Value: "-N"},
		{Key: "GOAMD64", Value: "v3"},
		{Key: "-race", Value: "true"},
	} {
		settings := append(slices.Clone(clean), s)
		if err := checkSettings(&buildinfo.BuildInfo{Settings: settings}, "amd64"); err == nil || !strings.Contains(err.Error(), s.Key+"="+s.Value) {
			t.Errorf("checkSettings(a build with %s=%s) = %v; want an error naming it", s.Key, s.Value, err)
		}
	}
}

// The documented commands write the image into the checkout's root. Left
// there untracked, it would make the next build's tree modified: version
// "+dirty", tag "-dirty", other bytes, and a name the DaemonSet does not
// use. Every -o FILE the docs name, and its .digest, must be ignored by git.
func TestDocumentedOutputIgnored(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("skipping: no git: %v", err)
	}
	root := filepath.Join("..", "..")
	if err := exec.Command("git", "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		t.Skipf("skipping: not in a git checkout: %v", err)
	}
	outFlag := regexp.MustCompile(`hack/image\s+-o\s+([^\s\x60]+)`)
	var outs []string
	for _, doc := range []string{"README.md", "docs/deploy.md", "deploy/nodevol.yaml", "deploy/csi/nodevol-csi.yaml", "hack/image/main.go"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range outFlag.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "FILE" && !strings.Contains(m[1], "/") {
				outs = append(outs, m[1], m[1]+".digest")
			}
		}
	}
	if len(outs) == 0 {
		t.Fatal("no `go run ./hack/image -o FILE` with a FILE in the checkout found in the docs")
	}
	for _, f := range outs {
		if err := exec.Command("git", "-C", root, "check-ignore", "-q", "--no-index", f).Run(); err != nil {
			t.Errorf("git check-ignore %s: %v; want it ignored, or the next image built in this checkout is +dirty", f, err)
		}
	}
}

// -binary picks what the image runs; an unknown one is a usage error
// (status 2) naming the known ones, before anything is built. Nothing
// here builds nodevol-csi: its module's dependencies (gRPC, the CSI spec)
// are not the root module's, and the unprivileged CI run has no network.
func TestBinaryFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "x.tar")
	if code := run([]string{"-o", out, "-binary", "nodevol-cs"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), `-binary "nodevol-cs": unknown binary; want one of nodevol, nodevol-csi`) {
		t.Errorf("run(-binary nodevol-cs) = %d, stderr %q; want 2 and the known binaries", code, stderr.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("run(-binary nodevol-cs) left %s: %v", out, err)
	}
	if _, err := binaryNamed(""); !errors.Is(err, ErrUnknownBinary) {
		t.Errorf("binaryNamed(\"\") = %v; want ErrUnknownBinary", err)
	}

	csi, err := binaryNamed("nodevol-csi")
	if err != nil {
		t.Fatalf("binaryNamed(nodevol-csi) = %v", err)
	}
	if csi.name != "nodevol-csi" || csi.moduleDir != "csi" || csi.pkg != "./cmd/nodevol-csi" || len(csi.cmd) != 0 ||
		csi.image != "ghcr.io/nodevol/nodevol-csi:v0.0.0-dev" || csi.title != "nodevol-csi" {
		t.Errorf("binaryNamed(nodevol-csi) = %+v; want ./cmd/nodevol-csi in csi/, no Cmd, ghcr.io/nodevol/nodevol-csi:v0.0.0-dev", csi)
	}
	nodevol, err := binaryNamed("nodevol")
	if err != nil {
		t.Fatalf("binaryNamed(nodevol) = %v", err)
	}
	if nodevol.moduleDir != "." || nodevol.pkg != "./cmd/nodevol" || !slices.Equal(nodevol.cmd, []string{"serve"}) || nodevol.image != "ghcr.io/nodevol/nodevol:v0.0.0-dev" ||
		!slices.Equal(nodevol.also, []program{{name: "nodevol-agent", pkg: "./cmd/nodevol-agent"}}) {
		t.Errorf("binaryNamed(nodevol) = %+v; want ./cmd/nodevol in the root module, Cmd [serve], ghcr.io/nodevol/nodevol:v0.0.0-dev", nodevol)
	}

	// Each binary's module is where it says, with the path it says, and
	// holds its main package: read from the checkout, not built.
	root := filepath.Join("..", "..")
	for name, b := range binaries {
		dir := filepath.Join(root, filepath.FromSlash(b.moduleDir))
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if first, _, _ := strings.Cut(string(mod), "\n"); first != "module "+b.modulePath {
			t.Errorf("%s: %s/go.mod begins %q; want module %s", name, b.moduleDir, first, b.modulePath)
		}
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(b.pkg), "main.go")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for _, p := range b.also {
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p.pkg), "main.go")); err != nil {
				t.Errorf("%s, beside %s: %v", p.name, name, err)
			}
		}
		if b.name != name || b.title == "" || b.desc == "" {
			t.Errorf("binaries[%q] = %+v; want its name, a title and a description", name, b)
		}
	}
}

// TestDefaultNamesAreTheDaemonSets: without -name an image is named as the
// DaemonSet that runs it names it (deploy/nodevol.yaml for nodevol,
// deploy/csi/nodevol-csi.yaml for nodevol-csi), so that `go run
// ./hack/image -o FILE` as the README shows it builds the image the
// DaemonSet runs. It fails when a manifest's image: and the default drift
// apart.
func TestDefaultNamesAreTheDaemonSets(t *testing.T) {
	imageLine := regexp.MustCompile(`(?m)^\s+image:\s*(\S+)\s*$`)
	for bin, manifest := range map[string]string{"nodevol": "deploy/nodevol.yaml", "nodevol-csi": "deploy/csi/nodevol-csi.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", manifest))
		if err != nil {
			t.Fatal(err)
		}
		m := imageLine.FindAllStringSubmatch(string(b), -1)
		if len(m) != 1 {
			t.Fatalf("%s has %d image: lines; want one", manifest, len(m))
		}
		if got := binaries[bin].image; got != m[0][1] {
			t.Errorf("the default name of -binary %s is %q; %s runs %q", bin, got, manifest, m[0][1])
		}
	}
}

// TestVersionAndArchFlags: -version takes a release version, -arch one or
// both architectures, each once; anything else is refused before a build.
func TestVersionAndArchFlags(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.2.3": true, "v0.1.0": true, "v10.20.30": true, "v1.2.3-rc.1": true, "v1.2.3-alpha-2": true,
		"1.2.3": false, "v1.2": false, "v1.2.3.4": false, "v01.2.3": false, "v1.2.3-": false,
		"v1.2.3+meta": false, "v1.2.3-a b": false, "": false, "v": false, "va.b.c": false,
	} {
		if got := validVersion(v); got != want {
			t.Errorf("validVersion(%q) = %v; want %v", v, got, want)
		}
	}
	out := filepath.Join(t.TempDir(), "x.tar")
	for _, args := range [][]string{
		{"-arch", "amd64,amd64"}, {"-arch", "riscv64"}, {"-arch", "amd64,"}, {"-version", "1.2.3"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"-o", out}, args...), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), args[0]) {
			t.Errorf("run(%q) = %d, stderr %q; want 1 and the flag named", args, code, stderr.String())
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused build left %s: %v", out, err)
	}
}

// staticFor checks that the image's layer holds /name, a static
// executable for arch.
func staticFor(t *testing.T, files map[string]ociimage.LayerFile, name, arch string) {
	t.Helper()
	bin := files[name]
	if bin.Header == nil || bin.Header.Mode != 0o755 {
		t.Fatalf("%s = %+v; want an executable", name, bin.Header)
	}
	exe, err := elf.NewFile(bytes.NewReader(bin.Data))
	if err != nil {
		t.Fatalf("%s is not an ELF file: %v", name, err)
	}
	if want, ok := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; !ok || exe.Machine != want {
		t.Errorf("%s is for %v; want %v (GOARCH %s)", name, exe.Machine, want, arch)
	}
	for _, p := range exe.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: want a static binary", name)
		}
	}
}
