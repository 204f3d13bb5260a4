package main

import (
	"archive/tar"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// runsInImage unpacks the image's layer into a directory and runs
// `/nodevol version --json` chrooted into it: the static binary runs on
// the base this tool writes, with nothing of the host, and reports the
// revision the image is labelled with; and `/nodevol serve --help`, the
// image's Cmd asking for help: nodevol runs the agent beside it,
// /nodevol-agent.
func runsInImage(t *testing.T, l *ociimage.Layout) {
	t.Helper()
	mounttest.RequireRoot(t, "chroot into the unpacked image")
	root := t.TempDir()
	for _, f := range l.Layer {
		p := filepath.Join(root, filepath.FromSlash(f.Header.Name))
		var err error
		switch f.Header.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(f.Header.Mode).Perm())
		case tar.TypeReg:
			err = os.WriteFile(p, f.Data, os.FileMode(f.Header.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(f.Header.Linkname, p)
		default:
			t.Fatalf("layer entry %s of type %c: the tool writes none", f.Header.Name, f.Header.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("/nodevol", "version", "--json")
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chroot %s /nodevol version --json: %v\n%s", root, err, out)
	}
	var v struct {
		Revision *string
		OS, Arch string
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if v.OS != "linux" || v.Arch != l.Config.Architecture {
		t.Errorf("nodevol in the image reports %s/%s; want linux/%s", v.OS, v.Arch, l.Config.Architecture)
	}
	if label := l.Manifest.Annotations["org.opencontainers.image.revision"]; v.Revision != nil && *v.Revision != label {
		t.Errorf("nodevol in the image reports revision %s; the image is labelled %s", *v.Revision, label)
	}
	cmd = exec.Command("/nodevol", "serve", "--help")
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	out, err = cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "Usage: nodevol-agent ") {
		t.Errorf("chroot %s /nodevol serve --help: %v; want the agent's help\n%s", root, err, out)
	}
}
