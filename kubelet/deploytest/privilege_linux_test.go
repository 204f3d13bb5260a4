package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodevol/nodevol/internal/testsupport/clitest"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestDaemonSetPrivilegeSuffices runs nodevol scan with exactly the
// privilege deploy/'s DaemonSet gives its container (its runAsUser, only
// the capabilities it adds, no_new_privs) on a kubelet root whose emptyDir
// plugin directory and volume directory belong to another user with mode
// 0700, the volume holding a foreign mount: the volume is found in
// danger. Without the added capabilities the plugin directory, which the
// scan must list, cannot be read (a problem naming it, no verdict for the
// volume): they are needed, not decoration. (The volume directory itself
// need not be readable: the scan looks at it by a statx from its parent
// and answers from the mount table.)
func TestDaemonSetPrivilegeSuffices(t *testing.T) {
	mounttest.RequireMounts(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		mounttest.Skip(t, "no setpriv (util-linux) to run nodevol with the DaemonSet's capabilities: %v", err)
	}
	docs, err := readManifests(deployDir, csiDir, secureMetricsDir, chartDir)
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := newAPIServer().load(docs)
	if len(errs) > 0 || len(objs.daemonSets) != 1 {
		t.Fatalf("loading deploy/: %v (%d DaemonSets)", errs, len(objs.daemonSets))
	}
	var sc *corev1.SecurityContext
	for ds := range objs.daemonSets {
		sc = ds.Spec.Template.Spec.Containers[0].SecurityContext
	}
	if sc == nil || sc.RunAsUser == nil || sc.Capabilities == nil {
		t.Fatalf("the DaemonSet's container has no runAsUser or capabilities: %+v", sc)
	}
	bin := clitest.Build(t, "github.com/nodevol/nodevol/cmd/nodevol")

	root := t.TempDir()
	if err := os.Chmod(root, 0o750); err != nil {
		t.Fatal(err)
	}
	const owner = 1000
	vol := filepath.Join(root, "pods/11111111-2222-3333-4444-555555555555/volumes/kubernetes.io~empty-dir/cache")
	nas := filepath.Join(vol, "nas")
	if err := os.MkdirAll(nas, 0o755); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Dir(vol)
	for _, d := range []string{nas, vol, plugin} {
		if err := os.Chown(d, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{vol, plugin} {
		if err := os.Chmod(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("nas", nas, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", nas, err)
	}
	t.Cleanup(func() { unix.Unmount(nas, unix.MNT_DETACH) })

	scan := func(caps []corev1.Capability) (verdict, reason string) {
		t.Helper()
		bounding := "-all"
		for _, c := range caps {
			bounding += ",+" + strings.ToLower(string(c))
		}
		args := []string{"--reuid=" + strconv.FormatInt(*sc.RunAsUser, 10), "--bounding-set=" + bounding,
			"--inh-caps=-all", "--no-new-privs", bin, "scan", "--json", "--root", root}
		cmd := exec.Command(setpriv, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		// Exit status 1 is scan's "a volume in danger".
		if ee := (*exec.ExitError)(nil); err != nil && !errors.As(err, &ee) {
			t.Fatalf("setpriv %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		sc := bufio.NewScanner(&stdout)
		for sc.Scan() {
			var v struct{ Path, Verdict, Reason, Problem, Error string }
			if json.Unmarshal(sc.Bytes(), &v) != nil {
				continue
			}
			if v.Path == vol {
				return v.Verdict, v.Reason
			}
			if v.Problem == plugin {
				return "problem", v.Error
			}
		}
		t.Fatalf("setpriv %s: no line for %s in\n%s\n%s", strings.Join(args, " "), vol, stdout.String(), stderr.String())
		return "", ""
	}
	if v, why := scan(sc.Capabilities.Add); v != "danger" {
		t.Errorf("with the DaemonSet's capabilities %v: verdict %q (%s); want danger", sc.Capabilities.Add, v, why)
	}
	if v, why := scan(nil); v != "problem" {
		t.Errorf("with no capability: verdict %q (%s); want a problem naming %s (the 0700 plugin directory cannot be listed): is the capability still needed?", v, why, plugin)
	}
}
