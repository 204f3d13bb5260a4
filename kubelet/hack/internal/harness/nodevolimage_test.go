package harness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadNodevolImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nodevol")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "image.tar")
	if err := writeOCILayout(tarPath, imageSpec{Name: "ghcr.io/nodevol/nodevol:v1", Entrypoint: []string{"/nodevol"}, Cmd: []string{"serve"},
		Files: []imageFile{{HostPath: bin, ImagePath: "/nodevol", Mode: 0o755}}}); err != nil {
		t.Fatal(err)
	}
	name, digest, err := ociIndexImage(tarPath)
	if err != nil {
		t.Fatalf("ociIndexImage = %v", err)
	}
	if name != "ghcr.io/nodevol/nodevol:v1" || !sha256Digest.MatchString(digest) {
		t.Fatalf("ociIndexImage = %s, %s", name, digest)
	}
	if _, err := readNodevolImage(tarPath); err == nil || !strings.Contains(err.Error(), "digest file") {
		t.Errorf("readNodevolImage without a digest file = %v; want an error", err)
	}
	if err := os.WriteFile(tarPath+".digest", []byte(digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := readNodevolImage(tarPath)
	if err != nil || img.Name != name || img.Digest != digest || img.Tar != tarPath {
		t.Errorf("readNodevolImage = %+v, %v", img, err)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	if err := os.WriteFile(tarPath+".digest", []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readNodevolImage(tarPath); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("readNodevolImage with another digest = %v; want ErrDigestMismatch", err)
	}
	if err := os.WriteFile(tarPath+".digest", []byte("latest"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readNodevolImage(tarPath); err == nil || !strings.Contains(err.Error(), "not a sha256 digest") {
		t.Errorf("readNodevolImage with %q = %v; want an error", "latest", err)
	}
}

func TestDigestInImageList(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	list := "REF                                    TYPE                                       DIGEST  SIZE    PLATFORMS   LABELS\n" +
		"docker.io/library/nodevol-e2e-pause:1.0 application/vnd.oci.image.manifest.v1+json sha256:" + strings.Repeat("cd", 32) + " 1.0 MiB linux/amd64 io.cri-containerd.image=managed\n" +
		"ghcr.io/nodevol/nodevol:v1 application/vnd.oci.image.manifest.v1+json " + d + " 12.0 MiB linux/amd64 io.cri-containerd.image=managed\n"
	got, err := digestInImageList(list, "ghcr.io/nodevol/nodevol:v1")
	if err != nil || got != d {
		t.Errorf("digestInImageList = %s, %v; want %s", got, err, d)
	}
	if _, err := digestInImageList(list, "ghcr.io/nodevol/nodevol:v2"); err == nil {
		t.Errorf("digestInImageList of a missing image = nil error")
	}
}
