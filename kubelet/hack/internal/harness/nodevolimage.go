package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// nodevolImage is the exporter's image: an OCI layout tarball, the image
// name its index gives it, and the manifest digest recorded beside it
// (FILE.digest), which containerd must report once it imported the file.
type nodevolImage struct {
	Tar    string `json:"tar"`
	Name   string `json:"name"`
	Digest string `json:"digest"`
	// ConfigDigest is the config's digest: the image ID containerd's CRI
	// reports for an imported image, which has no repository digest. Set
	// for the deploy scenario's rollout images.
	ConfigDigest string `json:"configDigest,omitempty"`
}

// ErrDigestMismatch is matched by the errors of a digest that is not the
// one recorded for the image.
var ErrDigestMismatch = errors.New("image digest mismatch")

// rootModule is the directory of the root module (github.com/nodevol/nodevol)
// as the kubelet module's replace directive names it.
func rootModule(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/nodevol/nodevol").Output()
	if err != nil {
		return "", fmt.Errorf("finding the root module (run the e2e from the kubelet module): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// buildNodevolImage writes the image of one of nodevol's binaries to out
// (and out.digest) with the root module's own image tool, `go run
// ./hack/image -binary binary -o out -name name`: the image a release
// ships, not one of the harness's making, named as the DaemonSet names it
// (as CI does), so that its pod spec's image reference is the imported
// image.
func buildNodevolImage(ctx context.Context, binary, out, name string) error {
	root, err := rootModule(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	args := []string{"run", "./hack/image", "-binary", binary, "-o", out, "-name", name}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), root, err, b)
	}
	return nil
}

// imageOf is the image of one of nodevol's binaries that a scenario runs:
// read from the tarball given (a -*-image flag), or, when none is, built
// into dir with buildNodevolImage and named ref, as the DaemonSet names it.
func imageOf(ctx context.Context, given, dir, binary, ref string, log *logger) (nodevolImage, error) {
	tarPath := given
	if tarPath == "" {
		tarPath = filepath.Join(dir, binary+"-image.tar")
		t := time.Now()
		if err := buildNodevolImage(ctx, binary, tarPath, ref); err != nil {
			return nodevolImage{}, err
		}
		log.Printf("%s image built in %.1fs", binary, time.Since(t).Seconds())
	}
	return readNodevolImage(tarPath)
}

// scenarioSelected reports whether -run selects a scenario of one of the
// names.
func scenarioSelected(run string, names ...string) (bool, error) {
	selected, err := selectScenarios(run)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(selected, func(s scenario) bool { return slices.Contains(names, s.name) }), nil
}

// readNodevolImage reads the image's name and manifest digest from the
// tarball's index.json and checks that FILE.digest records that digest.
func readNodevolImage(tarPath string) (nodevolImage, error) {
	img := nodevolImage{Tar: tarPath}
	name, digest, err := ociIndexImage(tarPath)
	if err != nil {
		return img, err
	}
	recorded, err := readDigestFile(tarPath + ".digest")
	if err != nil {
		return img, err
	}
	if recorded != digest {
		return img, fmt.Errorf("%w: %s.digest records %s, the tarball's index.json names manifest %s", ErrDigestMismatch, tarPath, recorded, digest)
	}
	img.Name, img.Digest = name, digest
	return img, nil
}

var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// readDigestFile reads a digest file: "sha256:<64 hex>" and a newline.
func readDigestFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("the image's digest file: %w", err)
	}
	d := strings.TrimSpace(string(b))
	if !sha256Digest.MatchString(d) {
		return "", fmt.Errorf("%s: %q is not a sha256 digest (sha256:<64 hex digits>)", path, d)
	}
	return d, nil
}

// ociIndexImage reads the image's name and manifest digest from an OCI
// layout tarball holding one image, as ociimage.Inspect checks it (every
// blob's digest and size): the name is the io.containerd.image.name
// annotation `ctr images import` names it by.
func ociIndexImage(tarPath string) (name, digest string, err error) {
	l, err := ociimage.InspectFile(tarPath)
	if err != nil {
		return "", "", fmt.Errorf("the nodevol image %s: %w", tarPath, err)
	}
	name = l.Index.Annotations[ociimage.AnnotationImageName]
	if name == "" {
		return "", "", fmt.Errorf("the nodevol image %s: index.json: the manifest has no %s annotation", tarPath, ociimage.AnnotationImageName)
	}
	return name, l.Index.Digest, nil
}

// imageDigest is the digest containerd recorded for the image in its
// k8s.io namespace (`ctr images ls`: REF TYPE DIGEST ...).
func (c *containerd) imageDigest(ctx context.Context, name string) (string, error) {
	out, err := c.ctrOutput(ctx, "-n", "k8s.io", "images", "ls")
	if err != nil {
		return "", err
	}
	return digestInImageList(out, name)
}

// digestInImageList finds the image's digest in `ctr images ls` output.
func digestInImageList(list, name string) (string, error) {
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == name {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("containerd lists no image %s", name)
}

// checkImage checks that containerd recorded the image under the digest
// recorded beside its tarball.
func (c *containerd) checkImage(ctx context.Context, img nodevolImage) error {
	got, err := c.imageDigest(ctx, img.Name)
	if err != nil {
		return err
	}
	if got != img.Digest {
		return fmt.Errorf("%w: containerd imported %s as %s; %s.digest records %s", ErrDigestMismatch, img.Name, got, img.Tar, img.Digest)
	}
	return nil
}
