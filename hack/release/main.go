// Command release builds a nodevol release: for linux/amd64 and
// linux/arm64, the binaries nodevol (./cmd/nodevol), nodevol-agent
// (./cmd/nodevol-agent, in nodevol's image: "nodevol serve" runs it),
// nodevol-csi (the csi/ module) and nodevol-kubelet (the kubelet/ module, built by
// kubelet/hack/build.sh), both images as multi-platform OCI image layouts
// (hack/image), an SPDX 2.3 SBOM of the Go modules in each image and in
// nodevol-kubelet (from the binaries' build info), and SHA256SUMS of it
// all.
//
//	go run ./hack/release -version v1.2.3 -o DIR [-kubelet-arch amd64,arm64]
//
// Run it in a checkout of the root module, at the commit tagged VERSION.
// DIR must not exist or be empty. Every binary reports VERSION (nodevol
// version, nodevol-agent --version, nodevol-csi --version; nodevol-kubelet --version says
// v<Kubernetes version>+nodevol.VERSION), the images are named
// ghcr.io/nodevol/nodevol:VERSION and ghcr.io/nodevol/nodevol-csi:VERSION,
// and their digests (the image indexes') are printed on stdout and written
// to DIR/DIGESTS.
//
// Reproducible: the same commit built twice, on any machine with the same
// Go, gives the same bytes in every file (CI builds it twice and compares).
// Everything is built with CGO_ENABLED=0 and -trimpath, the version
// stamped with -ldflags -X; the go command's VCS stamp, every timestamp
// in the images and the SBOMs' creation time come from the commit. The
// go command stamps no VCS state in a linked git worktree (see
// hack/image): a release is built from a clone.
//
// -kubelet-arch narrows nodevol-kubelet's architectures (none: no
// nodevol-kubelet, and no SBOM of it): a cold nodevol-kubelet build
// compiles most of Kubernetes, for each architecture, and CI builds amd64
// only (see docs/release.md). A release builds both.
package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodevol/nodevol/internal/tools/checkout"
	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// registry is where the release's images are named.
const registry = "ghcr.io/nodevol/"

// arches are the release's architectures.
var arches = []string{"amd64", "arm64"}

// images are the images a release builds, by hack/image's -binary.
var images = []string{"nodevol", "nodevol-csi"}

// alsoIn are the programs an image holds beside the one it is named
// after (hack/image keeps them in -bin-dir too): "nodevol serve" execs
// nodevol-agent.
var alsoIn = map[string][]string{"nodevol": {"nodevol-agent"}}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "the release's `VERSION`, vX.Y.Z")
	out := fs.String("o", "", "write the release to `DIR` (new or empty)")
	kubeletArch := fs.String("kubelet-arch", strings.Join(arches, ","), "build nodevol-kubelet for these architectures (comma-separated), or none")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: go run ./hack/release -version vX.Y.Z -o DIR [-kubelet-arch amd64,arm64]")
		return 2
	}
	var ka []string
	if *kubeletArch != "none" {
		ka = strings.Split(*kubeletArch, ",")
	}
	for i, a := range ka {
		if !slices.Contains(arches, a) || slices.Contains(ka[:i], a) {
			fmt.Fprintf(stderr, "release: -kubelet-arch %q: want amd64, arm64 or both, each once, or none\n", *kubeletArch)
			return 2
		}
	}
	r, err := build(*version, *out, ka, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 1
	}
	stdout.Write(r)
	return 0
}

// build builds the release into dir and returns DIGESTS's content.
func build(version, dir string, kubeletArches []string, log io.Writer) ([]byte, error) {
	start := time.Now()
	root, err := checkout.Root("go")
	if err != nil {
		return nil, err
	}
	if err := cleanTree(root); err != nil {
		return nil, err
	}
	if err := emptyDir(dir); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "nodevol-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	// The images, and with them nodevol, nodevol-agent and nodevol-csi for each
	// architecture: hack/image builds them, checks their build settings
	// and -version, and keeps the binaries it put in the images.
	imageCmd := filepath.Join(tmp, "image")
	if err := runCmd(log, root, nil, "go", "build", "-o", imageCmd, "./hack/image"); err != nil {
		return nil, err
	}
	var digests bytes.Buffer
	imageDigest := map[string]string{}
	for _, name := range images {
		step := time.Now()
		ref := registry + name + ":" + version
		tarball := filepath.Join(dir, name+"-image.oci.tar")
		if err := runCmd(log, root, nil, imageCmd, "-binary", name, "-arch", strings.Join(arches, ","),
			"-version", version, "-name", ref, "-bin-dir", dir, "-o", tarball); err != nil {
			return nil, err
		}
		if err := checkImage(tarball, version); err != nil {
			return nil, err
		}
		d, err := os.ReadFile(tarball + ".digest")
		if err != nil {
			return nil, err
		}
		if err := os.Remove(tarball + ".digest"); err != nil {
			return nil, err
		}
		imageDigest[name] = strings.TrimSpace(string(d))
		fmt.Fprintf(&digests, "%s@%s\n", ref, imageDigest[name])
		fmt.Fprintf(log, "release: %s image and binaries in %s\n", name, time.Since(step).Round(time.Second))
	}

	// nodevol-kubelet, by the one script that builds it, static for every
	// architecture (no C toolchain or libc of the builder in it).
	for _, arch := range kubeletArches {
		step := time.Now()
		env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch, "NODEVOL_VERSION=" + version}
		if err := runCmd(log, root, env, filepath.Join(root, "kubelet", "hack", "build.sh"),
			filepath.Join(dir, "nodevol-kubelet-linux-"+arch)); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "release: nodevol-kubelet for linux/%s in %s\n", arch, time.Since(step).Round(time.Second))
	}

	// What the binaries report, for the one architecture that runs here.
	if err := checkVersions(dir, version, kubeletArches); err != nil {
		return nil, err
	}

	created, err := commitTime(root)
	if err != nil {
		return nil, err
	}
	sboms := slices.Clone(images)
	if len(kubeletArches) > 0 {
		sboms = append(sboms, "nodevol-kubelet")
	}
	for _, name := range sboms {
		archs := arches
		subject := name + "-image.oci.tar"
		if name == "nodevol-kubelet" {
			archs, subject = kubeletArches, ""
		}
		var programs []sbomProgram
		for _, prog := range append([]string{name}, alsoIn[name]...) {
			p := sbomProgram{name: prog}
			for _, a := range archs {
				p.bins = append(p.bins, filepath.Join(dir, prog+"-linux-"+a))
			}
			programs = append(programs, p)
		}
		doc, err := sbom(name, version, created, programs, subject, imageDigest[name], dir)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".spdx.json"), doc, 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "DIGESTS"), digests.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := writeSums(dir); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "release: %s in %s, %s\n", version, dir, time.Since(start).Round(time.Second))
	return digests.Bytes(), nil
}

// cleanTree refuses a checkout with changes git sees: its binaries would
// say "+dirty" or ".dirty", and no one could build them again from the
// commit.
func cleanTree(root string) error {
	cmd := exec.Command("git", "status", "--porcelain")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git status (a release is built from a git checkout): %w", err)
	}
	if len(out) > 0 {
		return fmt.Errorf("the checkout has changes; commit or remove them:\n%s", out)
	}
	return nil
}

// emptyDir makes dir, or checks that it is an empty directory: a release
// never mixes with what was there.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty", dir)
	}
	return nil
}

// runCmd runs name with args in dir, with env added, its output to log.
func runCmd(log io.Writer, dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", filepath.Base(name), strings.Join(args, " "), err)
	}
	return nil
}

// checkImage reads the image layout back and checks that it holds one
// image per release architecture, each saying version.
func checkImage(tarball, version string) error {
	l, err := ociimage.InspectIndexFile(tarball)
	if err != nil {
		return err
	}
	var got []string
	for _, img := range l.Images {
		got = append(got, img.Config.Architecture)
		if v := img.Manifest.Annotations["org.opencontainers.image.version"]; v != version {
			return fmt.Errorf("%s: the %s image says version %q; want %s", tarball, img.Config.Architecture, v, version)
		}
	}
	if !slices.Equal(got, arches) {
		return fmt.Errorf("%s: images for %v; want %v", tarball, got, arches)
	}
	return nil
}

// checkVersions runs the binaries built for this machine's architecture
// and checks that they report version.
func checkVersions(dir, version string, kubeletArches []string) error {
	if !slices.Contains(arches, runtime.GOARCH) {
		return nil
	}
	bin := func(name string) string { return filepath.Join(dir, name+"-linux-"+runtime.GOARCH) }
	out, err := exec.Command(bin("nodevol"), "version", "--json").Output()
	if err != nil {
		return fmt.Errorf("nodevol version: %w", err)
	}
	var v struct{ Version string }
	if err := json.Unmarshal(out, &v); err != nil || v.Version != version {
		return fmt.Errorf("nodevol version --json says %q (%v); want version %s", out, err, version)
	}
	out, err = exec.Command(bin("nodevol-agent"), "--version").Output()
	if err != nil {
		return fmt.Errorf("nodevol-agent --version: %w", err)
	}
	if f := strings.Fields(string(out)); len(f) != 2 || f[0] != "nodevol-agent" || f[1] != version {
		return fmt.Errorf("nodevol-agent --version says %q; want nodevol-agent %s", out, version)
	}
	out, err = exec.Command(bin("nodevol-csi"), "--version").Output()
	if err != nil {
		return fmt.Errorf("nodevol-csi --version: %w", err)
	}
	if f := strings.Fields(string(out)); len(f) < 2 || f[0] != "nodevol-csi" || f[1] != version {
		return fmt.Errorf("nodevol-csi --version says %q; want nodevol-csi %s", out, version)
	}
	if slices.Contains(kubeletArches, runtime.GOARCH) {
		out, err = exec.Command(bin("nodevol-kubelet"), "--version").Output()
		if err != nil {
			return fmt.Errorf("nodevol-kubelet --version: %w", err)
		}
		if !strings.HasSuffix(strings.TrimSpace(string(out)), "+nodevol."+version) {
			return fmt.Errorf("nodevol-kubelet --version says %q; want ...+nodevol.%s", out, version)
		}
	}
	return nil
}

// commitTime is HEAD's committer time: the SBOMs' creation time, as the
// images' timestamps are.
func commitTime(dir string) (time.Time, error) {
	cmd := exec.Command("git", "-c", "log.showsignature=false", "log", "-1", "--format=%ct")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: %w", err)
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: %q: %w", out, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

// writeSums writes dir/SHA256SUMS: every other file of dir, sorted by
// name, as sha256sum writes and checks them (sha256sum -c SHA256SUMS).
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var sums bytes.Buffer
	for _, e := range entries { // sorted by name
		if e.Name() == "SHA256SUMS" {
			continue
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", filepath.Join(dir, e.Name()))
		}
		h, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", h, e.Name())
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), sums.Bytes(), 0o644)
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readBuildInfo is the build info of each of bins, which must list the
// same modules (the same source built for each architecture).
func readBuildInfo(bins []string) (*buildinfo.BuildInfo, error) {
	var first *buildinfo.BuildInfo
	for _, b := range bins {
		info, err := buildinfo.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("reading the build info of %s: %w", b, err)
		}
		if first == nil {
			first = info
			continue
		}
		if !slices.EqualFunc(first.Deps, info.Deps, func(a, b *debug.Module) bool { return moduleID(a) == moduleID(b) }) ||
			moduleID(&first.Main) != moduleID(&info.Main) || first.GoVersion != info.GoVersion {
			return nil, fmt.Errorf("%s and %s were built from different modules", bins[0], b)
		}
	}
	return first, nil
}
