package harness

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/nodevol/nodevol/internal/tools/ociimage"
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
	Env        []string // nil: PATH=/bin
	Files      []imageFile
	Symlinks   map[string]string      // path in the image -> link target
	Texts      map[string]string      // path in the image -> a 0644 file's content
	Dirs       map[string]fs.FileMode // directories with their modes
}

type imageFile struct {
	HostPath  string
	ImagePath string
	Mode      int64
}

// writeOCILayout writes spec as an OCI image layout tarball to out, the
// form `ctr images import` reads (internal/tools/ociimage): the base directories
// a container runtime mounts over, then spec's files and symlinks, every
// timestamp the epoch, so that the images are reproducible.
func writeOCILayout(out string, spec imageSpec) error {
	var entries []ociimage.Entry
	for _, d := range []string{"dev", "proc", "sys", "etc", "tmp", "run"} {
		if _, ok := spec.Dirs[d]; !ok {
			entries = append(entries, ociimage.Entry{Path: d, Type: ociimage.Dir, Mode: 0o755})
		}
	}
	for d, mode := range spec.Dirs {
		entries = append(entries, ociimage.Entry{Path: d, Type: ociimage.Dir, Mode: mode})
	}
	for p, text := range spec.Texts {
		entries = append(entries, ociimage.Entry{Path: p, Type: ociimage.File, Mode: 0o644, Data: []byte(text)})
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
	env := spec.Env
	if env == nil {
		env = []string{"PATH=/bin"}
	}
	_, err := ociimage.WriteFile(out, &ociimage.Image{
		Name: spec.Name,
		Config: ociimage.Config{
			Env:        env,
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

// The images the suite's pods run, under the names its image manifest
// (k8s.io/kubernetes/test/utils/image, v1.37.2) resolves with no
// KUBE_TEST_REPO_LIST, so that e2e.test runs unchanged and nothing is
// pulled: the tags are upstream's, the content is built here.
const (
	suiteAgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	suiteBusyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
)

// suitePath is the PATH of upstream's images (Alpine's, and busybox's).
const suitePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// suitePasswd and suiteGroup are the accounts the suite's images have:
// root and nobody as in busybox's image, and agnhost's
// user-defined-in-image (uid 1000) in group-defined-in-image (gid 50000),
// which the SupplementalGroups specs look up.
const (
	suitePasswd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
	suiteGroup  = "root:x:0:\nnobody:x:65534:\n"
)

// busyboxAllApplets is every applet of the busybox binary, as the paths
// `busybox --list-full` gives ("usr/bin/awk"), each a symlink to it.
func busyboxAllApplets(ctx context.Context, busybox string) (map[string]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busybox, err)
	}
	links := map[string]string{}
	for _, p := range strings.Fields(string(out)) {
		if p == "bin/busybox" {
			continue
		}
		links["/"+p] = "/bin/busybox"
	}
	if len(links) < 100 {
		return nil, fmt.Errorf("%s --list-full lists %d applets: not a full busybox", busybox, len(links))
	}
	return links, nil
}

// buildSuiteImages writes the images a whole cluster runs into dir: the
// pause image under the suite's pause name (also containerd's sandbox
// image), busybox with every applet of Debian's busybox-static as the
// suite's busybox, and agnhost (the binary built by kubelet/hack/build.sh
// --agnhost) as the suite's agnhost, with upstream's entrypoint
// (/agnhost, default argument pause), its /agnhost-2 link, its uploads
// directory and user, and the same busybox applets for the shell commands
// the specs run in it (upstream's is Alpine's). It returns their paths.
func buildSuiteImages(ctx context.Context, dir, busybox, agnhost string) ([]string, error) {
	pauseBin := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", pauseBin, pausePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s (run the e2e from the kubelet module): %w\n%s", pausePackage, err, out)
	}
	applets, err := busyboxAllApplets(ctx, busybox)
	if err != nil {
		return nil, err
	}
	bb := imageFile{HostPath: busybox, ImagePath: "/bin/busybox", Mode: 0o755}
	agnhostLinks := maps.Clone(applets) // agnhost's shell, as Alpine's
	agnhostLinks["/agnhost-2"] = "agnhost"
	specs := []struct {
		file string
		spec imageSpec
	}{
		{"suite-pause.tar", imageSpec{
			Name:       clusterSandboxImage,
			Entrypoint: []string{"/pause"},
			Files:      []imageFile{{HostPath: pauseBin, ImagePath: "/pause", Mode: 0o755}},
		}},
		{"suite-busybox.tar", imageSpec{
			Name: suiteBusyboxImage, Cmd: []string{"sh"}, Env: []string{suitePath},
			Files: []imageFile{bb}, Symlinks: applets,
			Texts: map[string]string{"/etc/passwd": suitePasswd, "/etc/group": suiteGroup},
			Dirs:  map[string]fs.FileMode{"tmp": 0o777 | fs.ModeSticky, "root": 0o700, "home": 0o755},
		}},
		{"suite-agnhost.tar", imageSpec{
			Name: suiteAgnhostImage, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{suitePath},
			Files:    []imageFile{bb, {HostPath: agnhost, ImagePath: "/agnhost", Mode: 0o755}},
			Symlinks: agnhostLinks,
			Texts: map[string]string{
				"/etc/passwd": suitePasswd + "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n",
				"/etc/group":  suiteGroup + "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n",
			},
			Dirs: map[string]fs.FileMode{"tmp": 0o777 | fs.ModeSticky, "root": 0o700, "uploads": 0o755, "home/user-defined-in-image": 0o755},
		}},
	}
	if agnhost == "" {
		specs = specs[:2] // no agnhost: the deploy scenario's pods run busybox
	}
	var tars []string
	for _, s := range specs {
		out := filepath.Join(dir, s.file)
		if err := writeOCILayout(out, s.spec); err != nil {
			return nil, err
		}
		tars = append(tars, out)
	}
	return tars, nil
}
