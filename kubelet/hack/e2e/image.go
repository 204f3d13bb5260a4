package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/nodevol/nodevol/internal/ociimage"
)

// The images the pods run, imported into containerd's k8s.io namespace and
// never pulled (imagePullPolicy: Never; sandbox_image is pauseImage).
const (
	pauseImage   = "docker.io/library/nodevol-e2e-pause:1.0"
	busyboxImage = "docker.io/library/nodevol-e2e-busybox:1.0"
)

// busyboxApplets are the commands the scenarios' containers use, as
// symlinks to /bin/busybox in the image.
var busyboxApplets = []string{"sh", "sleep", "cat", "echo", "ls", "mkdir", "touch", "true", "df", "mount"}

// imageSpec describes a single-layer image: regular files copied from the
// host, symlinks, and the process to run.
type imageSpec struct {
	Name       string
	Entrypoint []string
	Cmd        []string
	Files      []imageFile
	Symlinks   map[string]string // path in the image -> link target
}

type imageFile struct {
	HostPath  string
	ImagePath string
	Mode      int64
}

// writeOCILayout writes spec as an OCI image layout tarball to out, the
// form `ctr images import` reads (internal/ociimage): the base directories
// a container runtime mounts over, then spec's files and symlinks, every
// timestamp the epoch, so that the images are reproducible.
func writeOCILayout(out string, spec imageSpec) error {
	var entries []ociimage.Entry
	for _, d := range []string{"dev", "proc", "sys", "etc", "tmp", "run"} {
		entries = append(entries, ociimage.Entry{Path: d, Type: ociimage.Dir, Mode: 0o755})
	}
	for _, f := range spec.Files {
		e, err := ociimage.FileFrom(f.HostPath, f.ImagePath, fs.FileMode(f.Mode))
		if err != nil {
			return fmt.Errorf("image %s: %w", spec.Name, err)
		}
		entries = append(entries, e)
	}
	for l, target := range spec.Symlinks {
		entries = append(entries, ociimage.Entry{Path: l, Type: ociimage.Symlink, Target: target})
	}
	_, err := ociimage.WriteFile(out, &ociimage.Image{
		Name: spec.Name,
		Config: ociimage.Config{
			Env:        []string{"PATH=/bin"},
			Entrypoint: spec.Entrypoint,
			Cmd:        spec.Cmd,
			WorkingDir: "/",
		},
		Entries: entries,
	})
	if err != nil {
		return fmt.Errorf("image %s: writing %s: %w", spec.Name, out, err)
	}
	return nil
}

// pausePackage is the sandbox process's source, built static for the image.
const pausePackage = "github.com/nodevol/nodevol/kubelet/hack/e2e/pause"

// buildImages builds the pause binary and writes the pause and busybox
// image tarballs into dir, returning their paths.
func buildImages(ctx context.Context, dir, busybox string) ([]string, error) {
	pauseBin := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", pauseBin, pausePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s (run the e2e from the kubelet module): %w\n%s", pausePackage, err, out)
	}
	links := map[string]string{}
	for _, a := range busyboxApplets {
		links["/bin/"+a] = "busybox"
	}
	specs := map[string]imageSpec{
		"pause.tar": {
			Name:       pauseImage,
			Entrypoint: []string{"/pause"},
			Files:      []imageFile{{HostPath: pauseBin, ImagePath: "/pause", Mode: 0o755}},
		},
		"busybox.tar": {
			Name:     busyboxImage,
			Cmd:      []string{"sh"},
			Files:    []imageFile{{HostPath: busybox, ImagePath: "/bin/busybox", Mode: 0o755}},
			Symlinks: links,
		},
	}
	var tars []string
	for _, name := range []string{"pause.tar", "busybox.tar"} {
		out := filepath.Join(dir, name)
		if err := writeOCILayout(out, specs[name]); err != nil {
			return nil, err
		}
		tars = append(tars, out)
	}
	return tars, nil
}
