package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// TestDeployManifestDocs renders the chart as the deploy scenario
// installs it: every object of the agent, its secure metrics' RBAC and
// the driver, each with a path that creates it, each DaemonSet's one
// image, the scenario's values in the objects (the driver's secure
// metrics on, unlike the default), and the ServiceAccount
// deploy-6-secure-metrics scrapes as.
func TestDeployManifestDocs(t *testing.T) {
	docs, err := renderChartDocs("../../../../deploy/helm/nodevol", deployChartValues)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, d := range docs {
		text.Write(d.Object)
	}
	for _, want := range []string{`"--listen=:19477"`, `"--http-address=:19479"`, `"--interval=5s"`, `"containerPort":19477`, `"--secure-metrics-listen=:19478"`, `"containerPort":19478`, `"--secure-metrics-address=:19480"`, `"containerPort":19480`} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the render has no %s", want)
		}
	}
	var kinds []string
	for _, d := range docs {
		kinds = append(kinds, d.Kind)
		if _, err := d.collectionPath(); err != nil {
			t.Error(err)
		}
	}
	for _, want := range []string{"Namespace", "ServiceAccount", "DaemonSet", "CSIDriver", "ClusterRole", "ClusterRoleBinding"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("no %s in %v", want, kinds)
		}
	}
	for _, ds := range []string{"nodevol", "nodevol-csi"} {
		if img, err := daemonSetImage(docs, ds); err != nil || !strings.HasPrefix(img, "ghcr.io/nodevol/"+ds+":") {
			t.Errorf("DaemonSet %s's image %q, %v", ds, img, err)
		}
	}
	d := &deployRun{in: &deployInputs{Manifests: docs}}
	if ns, name, err := d.metricsReader(); err != nil || ns != "monitoring" || name != "prometheus-k8s" {
		t.Errorf("metricsReader() = %q, %q, %v; want monitoring, prometheus-k8s (the chart's default metricsReader.subjects)", ns, name, err)
	}
}

func TestReadManifestDocsRefusesUnknownKind(t *testing.T) {
	f := filepath.Join(t.TempDir(), "m.yaml")
	doc := "# only a comment\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: ns1\n"
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readManifestDocs([]string{f}); err == nil || !strings.Contains(err.Error(), "v1 Secret") {
		t.Errorf("a Secret: %v, want a refusal naming it", err)
	}
}

// TestRolloutImage checks that the rollout image has the same files, a
// config with the rollout label, another digest, and the "rollout" tag.
func TestRolloutImage(t *testing.T) {
	dir := t.TempDir()
	orig := filepath.Join(dir, "orig.tar")
	desc, err := ociimage.WriteFile(orig, &ociimage.Image{
		Name:   "ghcr.io/nodevol/nodevol:v0.0.0-dev",
		Config: ociimage.Config{Entrypoint: []string{"/nodevol"}, Labels: map[string]string{"a": "b"}},
		Entries: []ociimage.Entry{
			{Path: "nodevol", Type: ociimage.File, Mode: 0o755, Data: []byte("binary")},
			{Path: "tmp", Type: ociimage.Dir, Mode: 0o777 | os.ModeSticky},
			{Path: "bin/sh", Type: ociimage.Symlink, Target: "/nodevol"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	img := nodevolImage{Tar: orig, Name: "ghcr.io/nodevol/nodevol:v0.0.0-dev", Digest: desc.Digest}
	ro, err := rolloutImage(img, filepath.Join(dir, "rollout.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if ro.Name != "ghcr.io/nodevol/nodevol:rollout" || ro.Digest == img.Digest || ro.ConfigDigest == "" {
		t.Errorf("rollout image %s %s, original digest %s", ro.Name, ro.Digest, img.Digest)
	}
	a, err := ociimage.InspectFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ociimage.InspectFile(ro.Tar)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Config.Digest != ro.ConfigDigest || a.Manifest.Config.Digest == ro.ConfigDigest {
		t.Errorf("config digests: rollout %s (recorded %s), original %s", b.Manifest.Config.Digest, ro.ConfigDigest, a.Manifest.Config.Digest)
	}
	if b.Config.Config.Labels[rolloutLabel] != "1" || b.Config.Config.Labels["a"] != "b" || !slices.Equal(b.Config.Config.Entrypoint, a.Config.Config.Entrypoint) {
		t.Errorf("rollout config %+v", b.Config.Config)
	}
	if len(a.Layer) != len(b.Layer) {
		t.Fatalf("layers of %d and %d entries", len(a.Layer), len(b.Layer))
	}
	for i := range a.Layer {
		ha, hb := a.Layer[i].Header, b.Layer[i].Header
		if ha.Name != hb.Name || ha.Mode != hb.Mode || ha.Typeflag != hb.Typeflag || ha.Linkname != hb.Linkname || string(a.Layer[i].Data) != string(b.Layer[i].Data) {
			t.Errorf("entry %d: %+v, rollout %+v", i, ha, hb)
		}
	}
}
