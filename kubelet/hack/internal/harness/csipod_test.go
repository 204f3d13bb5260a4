package harness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const testCSIManifest = `# comments only
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: emptydir.nodevol.github.io
spec:
  attachRequired: false
  podInfoOnMount: true
  volumeLifecycleModes: [Ephemeral]
---
apiVersion: v1
kind: Namespace
metadata:
  name: nodevol-csi
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: nodevol-csi
  namespace: nodevol-csi
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nodevol-csi
  namespace: nodevol-csi
spec:
  selector:
    matchLabels: {app: nodevol-csi}
  template:
    metadata:
      labels: {app: nodevol-csi}
    spec:
      serviceAccountName: nodevol-csi
      containers:
      - name: nodevol-csi
        image: ghcr.io/nodevol/nodevol-csi:v0.0.0-dev
        args: [--kubelet-root=/var/lib/kubelet, --registration-dir=/registration, --node-id=$(NODE_NAME)]
        securityContext: {privileged: true}
        volumeMounts:
        - {name: kubelet-root, mountPath: /var/lib/kubelet, mountPropagation: Bidirectional}
        - {name: registry, mountPath: /registration}
      volumes:
      - name: kubelet-root
        hostPath: {path: /var/lib/kubelet, type: Directory}
      - name: registry
        hostPath: {path: /var/lib/kubelet/plugins_registry, type: Directory}
`

func writeManifest(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "csi.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCSIDriverPod(t *testing.T) {
	m, err := readCSIManifests(writeManifest(t, testCSIManifest))
	if err != nil {
		t.Fatal(err)
	}
	if m.Driver.Name != "emptydir.nodevol.github.io" || m.Namespace.Name != "nodevol-csi" || m.ServiceAccount.Name != "nodevol-csi" {
		t.Fatalf("manifests = %+v", m)
	}
	pod, err := csiDriverPod(m.DaemonSet, "/e2e/kubelet/root")
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if pod.Spec.NodeName != nodeName || !pod.Spec.HostNetwork || c.ImagePullPolicy != corev1.PullNever || pod.Namespace != "nodevol-csi" {
		t.Errorf("pod %s/%s: nodeName %q, hostNetwork %v, pull %s", pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Spec.HostNetwork, c.ImagePullPolicy)
	}
	if got := strings.Join(c.Args, " "); got != "--kubelet-root=/e2e/kubelet/root --registration-dir=/registration --node-id=$(NODE_NAME)" {
		t.Errorf("args %s", got)
	}
	if c.VolumeMounts[0].MountPath != "/e2e/kubelet/root" || c.VolumeMounts[1].MountPath != "/registration" {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	if pod.Spec.Volumes[0].HostPath.Path != "/e2e/kubelet/root" || pod.Spec.Volumes[1].HostPath.Path != "/e2e/kubelet/root/plugins_registry" {
		t.Errorf("volumes %+v", pod.Spec.Volumes)
	}
	if m.DaemonSet.Spec.Template.Spec.Volumes[0].HostPath.Path != "/var/lib/kubelet" {
		t.Error("csiDriverPod changed the DaemonSet")
	}
}

func TestCSIManifestsRefused(t *testing.T) {
	for _, tc := range []struct{ name, old, new string }{
		{"no propagation", "mountPropagation: Bidirectional", "mountPropagation: HostToContainer"},
		{"root mounted elsewhere", "mountPath: /var/lib/kubelet,", "mountPath: /kubelet,"},
		{"no kubelet root", "path: /var/lib/kubelet, type", "path: /var/lib/other, type"},
		{"unknown field", "podInfoOnMount: true", "podInfoOnMount: true\n  podinfoOnMount: true"},
		{"another kind", "kind: Namespace", "kind: ConfigMap"},
		{"no CSIDriver", "kind: CSIDriver", "kind: Namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(testCSIManifest, tc.old, tc.new, 1)
			if text == testCSIManifest {
				t.Fatalf("%q not in the manifest", tc.old)
			}
			m, err := readCSIManifests(writeManifest(t, text))
			if err == nil {
				_, err = csiDriverPod(m.DaemonSet, "/root")
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.name != "unknown field" && !errors.Is(err, ErrUnfitCSIManifests) {
				t.Errorf("error %v does not match ErrUnfitCSIManifests", err)
			}
		})
	}
}

// TestShippedCSIManifests: the root module's deploy/csi (what -csi-deploy
// reads by default) is what scenario 9 can run.
func TestShippedCSIManifests(t *testing.T) {
	m, err := readCSIManifests("../../../../deploy/csi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := csiDriverPod(m.DaemonSet, "/e2e/root"); err != nil {
		t.Fatal(err)
	}
}

func TestCSITeardownLine(t *testing.T) {
	const uid = "be87bf4b-4193-4e83-b602-fbaf6e6625e7"
	// As the stock kubelet v1.37.2 logs it (the e2e's kubelet log).
	line := `E1127 05:18:53.470017      65 nestedpendingoperations.go:348] Operation for "{volumeName:kubernetes.io/csi/` + uid + `-scratch podName:` + uid +
		` nodeName:}" failed. No retries permitted until 2026-11-27 05:19:25.470011129 +0000 UTC m=+77.414800277 (durationBeforeRetry 32s). Error: UnmountVolume.TearDown failed for volume "kubernetes.io/csi/` + uid +
		`-scratch" (UniqueName: "kubernetes.io/csi/` + uid + `-scratch") pod "` + uid + `" (UID: "` + uid + `") : kubernetes.io/csi: Unmounter.TearDownAt failed: rpc error: code = FailedPrecondition desc = 1 mount beneath the volume`
	if !csiTeardownLine(uid, "scratch").MatchString(line) {
		t.Error("the scratch volume's line does not match")
	}
	if csiTeardownLine(uid, "mem").MatchString(line) {
		t.Error("the mem volume's pattern matches the scratch volume's line")
	}
	ok := `I1127 05:20:29.570501      65 operation_generator.go:791] UnmountVolume.TearDown succeeded for volume "kubernetes.io/csi/` + uid + `-scratch" pod "` + uid + `" (UID: "` + uid + `"). InnerVolumeSpecName "scratch". PluginName "kubernetes.io/csi", VolumeGIDValue ""`
	if !csiTeardownLine(uid, "scratch").MatchString(ok) {
		t.Error("the success line does not match")
	}
}
