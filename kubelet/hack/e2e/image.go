package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
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

// epoch is every timestamp in the images, so that they are reproducible.
var epoch = time.Unix(0, 0).UTC()

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// layerTar is the image's only layer, an uncompressed tar: the parent
// directories of every entry, then the files, then the symlinks, each in
// a fixed order.
func layerTar(spec imageSpec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	var addDir func(p string) error
	addDir = func(p string) error {
		p = strings.TrimPrefix(path.Clean("/"+p), "/")
		if p == "" || dirs[p] {
			return nil
		}
		if err := addDir(path.Dir(p)); err != nil {
			return err
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: epoch})
	}
	for _, d := range []string{"dev", "proc", "sys", "etc", "tmp", "run"} {
		if err := addDir(d); err != nil {
			return nil, err
		}
	}
	for _, f := range spec.Files {
		data, err := os.ReadFile(f.HostPath)
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(path.Clean(f.ImagePath), "/")
		if err := addDir(path.Dir(name)); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.Mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	links := make([]string, 0, len(spec.Symlinks))
	for l := range spec.Symlinks {
		links = append(links, l)
	}
	sort.Strings(links)
	for _, l := range links {
		name := strings.TrimPrefix(path.Clean(l), "/")
		if err := addDir(path.Dir(name)); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: spec.Symlinks[l], Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeOCILayout writes spec as an OCI image layout tarball to out, the
// form `ctr images import` reads: oci-layout, index.json naming the image
// (io.containerd.image.name), and the layer, config and manifest blobs.
func writeOCILayout(out string, spec imageSpec) error {
	layer, err := layerTar(spec)
	if err != nil {
		return fmt.Errorf("image %s: layer: %w", spec.Name, err)
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Env":        []string{"PATH=/bin"},
			"Entrypoint": spec.Entrypoint,
			"Cmd":        spec.Cmd,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digestOf(layer)}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digestOf(config), Size: int64(len(config))},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: digestOf(layer), Size: int64(len(layer))}},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json",
			Digest:    digestOf(manifest),
			Size:      int64(len(manifest)),
			Annotations: map[string]string{
				"io.containerd.image.name":          spec.Name,
				"org.opencontainers.image.ref.name": spec.Name[strings.LastIndex(spec.Name, ":")+1:],
			},
			Platform: &platform{Architecture: runtime.GOARCH, OS: "linux"},
		}},
	})
	if err != nil {
		return err
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	err = put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	if err == nil {
		err = put("index.json", index)
	}
	for _, blob := range [][]byte{layer, config, manifest} {
		if err == nil {
			err = put("blobs/sha256/"+strings.TrimPrefix(digestOf(blob), "sha256:"), blob)
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
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
