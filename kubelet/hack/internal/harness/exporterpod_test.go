package harness

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodevol/nodevol/internal/agent"
)

const testDeploy = "testdata/deploy"

func testDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ds, _, err := readDaemonSet(testDeploy)
	if err != nil {
		t.Fatalf("readDaemonSet(%q) = %v", testDeploy, err)
	}
	return ds
}

var testExporterOptions = staticExporterOptions{uid: "0de0e2e0-0000-4000-8001-000100000007", image: "ghcr.io/nodevol/nodevol:test", kubeletRoot: "/work/nodevol/kubelet/root"}

func TestStaticExporterPod(t *testing.T) {
	ds := testDaemonSet(t)
	orig := ds.DeepCopy()
	ex, err := staticExporterPod(ds, testExporterOptions)
	if err != nil {
		t.Fatalf("staticExporterPod = %v", err)
	}
	if !reflect.DeepEqual(ds, orig) {
		t.Errorf("staticExporterPod changed the DaemonSet it was given")
	}
	p := ex.pod
	c := p.Spec.Containers[0]
	want := []string{"serve", "--root=/host/var/lib/kubelet", "--host-root=" + testExporterOptions.kubeletRoot, "--interval=10s", "--listen=:9477"}
	if !reflect.DeepEqual(c.Args, want) {
		t.Errorf("args = %q; want %q", c.Args, want)
	}
	if p.Name != "nodevol" || p.Namespace != "nodevol-system" || p.UID != testExporterOptions.uid {
		t.Errorf("pod %s/%s uid %s; want nodevol-system/nodevol uid %s", p.Namespace, p.Name, p.UID, testExporterOptions.uid)
	}
	if !p.Spec.HostNetwork {
		t.Errorf("hostNetwork = false; want true (no CNI in the harness)")
	}
	if c.Image != testExporterOptions.image || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %s, pull policy %s; want %s, Never", c.Image, c.ImagePullPolicy, testExporterOptions.image)
	}
	if p.Spec.ServiceAccountName != "" || p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v; want none (NodeRestriction refuses mirror pods naming one)", p.Spec.ServiceAccountName, p.Spec.AutomountServiceAccountToken)
	}
	if got := p.Spec.Volumes[0].HostPath.Path; got != testExporterOptions.kubeletRoot {
		t.Errorf("hostPath = %s; want the kubelet root %s", got, testExporterOptions.kubeletRoot)
	}
	// What the DaemonSet says about the container stays.
	oc := orig.Spec.Template.Spec.Containers[0]
	if !reflect.DeepEqual(c.VolumeMounts, oc.VolumeMounts) || !reflect.DeepEqual(c.SecurityContext, oc.SecurityContext) ||
		!reflect.DeepEqual(c.ReadinessProbe, oc.ReadinessProbe) || !reflect.DeepEqual(c.LivenessProbe, oc.LivenessProbe) ||
		!reflect.DeepEqual(c.Resources, oc.Resources) || !reflect.DeepEqual(p.Spec.Tolerations, orig.Spec.Template.Spec.Tolerations) {
		t.Errorf("mounts, security context, probes, resources or tolerations differ from the DaemonSet's")
	}
	if ex.readyURL != "http://127.0.0.1:9477/readyz" || ex.metricsURL != "http://127.0.0.1:9477/metrics" {
		t.Errorf("readyURL %s, metricsURL %s", ex.readyURL, ex.metricsURL)
	}
	if ex.interval != 10*time.Second || ex.root != "/host/var/lib/kubelet" || ex.hostRoot != testExporterOptions.kubeletRoot {
		t.Errorf("interval %v, root %s, hostRoot %s", ex.interval, ex.root, ex.hostRoot)
	}
}

func TestStaticExporterPodArgForms(t *testing.T) {
	ds := testDaemonSet(t)
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Args = []string{"serve", "--root", "/host/var/lib/kubelet/", "-host-root", "/var/lib/kubelet", "-interval=3s", "--listen", "127.0.0.1:9500"}
	c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(9500)
	ex, err := staticExporterPod(ds, testExporterOptions)
	if err != nil {
		t.Fatalf("staticExporterPod = %v", err)
	}
	want := []string{"serve", "--root", "/host/var/lib/kubelet/", "-host-root", testExporterOptions.kubeletRoot, "-interval=3s", "--listen", "127.0.0.1:9500"}
	if got := ex.pod.Spec.Containers[0].Args; !reflect.DeepEqual(got, want) {
		t.Errorf("args = %q; want %q", got, want)
	}
	if ex.interval != 3*time.Second || ex.readyURL != "http://127.0.0.1:9500/readyz" || ex.metricsURL != "http://127.0.0.1:9500/metrics" {
		t.Errorf("interval %v, readyURL %s, metricsURL %s", ex.interval, ex.readyURL, ex.metricsURL)
	}
}

func TestStaticExporterPodRefuses(t *testing.T) {
	mode := func(m corev1.MountPropagationMode) *corev1.MountPropagationMode { return &m }
	tests := []struct {
		name    string
		prepare func(spec *corev1.PodSpec)
		want    string
	}{
		{"no propagation", func(s *corev1.PodSpec) { s.Containers[0].VolumeMounts[0].MountPropagation = nil }, "want HostToContainer"},
		{"propagation None", func(s *corev1.PodSpec) {
			s.Containers[0].VolumeMounts[0].MountPropagation = mode(corev1.MountPropagationNone)
		}, "want HostToContainer"},
		{"propagation Bidirectional", func(s *corev1.PodSpec) {
			s.Containers[0].VolumeMounts[0].MountPropagation = mode(corev1.MountPropagationBidirectional)
		}, "want HostToContainer"},
		{"writable kubelet root", func(s *corev1.PodSpec) { s.Containers[0].VolumeMounts[0].ReadOnly = false }, "not mounted readOnly"},
		{"hostPath is not --host-root", func(s *corev1.PodSpec) { s.Volumes[0].HostPath.Path = "/var/lib/other" }, "--host-root says"},
		{"no --host-root", func(s *corev1.PodSpec) {
			s.Containers[0].Args = []string{"serve", "--root=/host/var/lib/kubelet"}
		}, "needs --root"},
		{"no --root", func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"serve", "--host-root=/var/lib/kubelet"} }, "needs --root"},
		{"--root twice", func(s *corev1.PodSpec) {
			s.Containers[0].Args = append(s.Containers[0].Args, "--root=/x")
		}, "given twice"},
		{"--host-root without value", func(s *corev1.PodSpec) {
			s.Containers[0].Args = []string{"serve", "--root=/host/var/lib/kubelet", "--host-root"}
		}, "has no value"},
		{"nothing at --root", func(s *corev1.PodSpec) { s.Containers[0].VolumeMounts[0].MountPath = "/host" }, "no volume is mounted at --root"},
		{"not a hostPath", func(s *corev1.PodSpec) {
			s.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}, "not a hostPath"},
		{"two containers", func(s *corev1.PodSpec) { s.Containers = append(s.Containers, s.Containers[0]) }, "2 containers"},
		{"a command", func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"/bin/sh"} }, "want the image's entrypoint"},
		{"not serve", func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"scan"} }, "want the image's entrypoint"},
		{"no readiness probe", func(s *corev1.PodSpec) { s.Containers[0].ReadinessProbe = nil }, "no HTTP readiness probe"},
		{"probe port unknown", func(s *corev1.PodSpec) {
			s.Containers[0].ReadinessProbe.HTTPGet.Port = intstr.FromString("web")
		}, `port "web"`},
		{"bad interval", func(s *corev1.PodSpec) {
			s.Containers[0].Args = append(s.Containers[0].Args[:3], "--interval=0s")
		}, "not a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := testDaemonSet(t)
			tt.prepare(&ds.Spec.Template.Spec)
			_, err := staticExporterPod(ds, testExporterOptions)
			if !errors.Is(err, ErrUnfitDaemonSet) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("staticExporterPod = %v; want ErrUnfitDaemonSet saying %q", err, tt.want)
			}
		})
	}
}

func TestReadDaemonSet(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(testDeploy, "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files map[string]string
		want  string // in the error; "" for none
	}{
		{"the stand-in", map[string]string{"ds.yaml": string(good), "README.md": "not a manifest", "kustomization.yaml": "resources: [ds.yaml]\n"}, ""},
		{"unknown field", map[string]string{"ds.yaml": strings.Replace(string(good), "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: true\n            readOnlyRootFileSystem: true", 1)}, "unknown field"},
		{"misplaced field", map[string]string{"ds.yaml": strings.Replace(string(good), "      volumes:", "      mountPropagation: HostToContainer\n      volumes:", 1)}, "unknown field"},
		{"duplicate field", map[string]string{"ds.yaml": strings.Replace(string(good), "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: true\n            readOnlyRootFilesystem: false", 1)}, "readOnlyRootFilesystem"},
		{"two DaemonSets", map[string]string{"a.yaml": string(good), "b.yml": string(good)}, "two DaemonSets"},
		{"none", map[string]string{"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n"}, "no DaemonSet"},
		{"old API", map[string]string{"ds.yaml": strings.Replace(string(good), "apiVersion: apps/v1", "apiVersion: extensions/v1beta1", 1)}, "want apps/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ds, _, err := readDaemonSet(dir)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("readDaemonSet = %v", err)
			case tt.want == "":
				if ds.Name != "nodevol" || len(ds.Spec.Template.Spec.Containers) != 1 {
					t.Errorf("readDaemonSet = %s with %d containers", ds.Name, len(ds.Spec.Template.Spec.Containers))
				}
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Errorf("readDaemonSet = %v; want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestShippedDaemonSetConverts: the DaemonSet of the root module's
// deploy/ (what -deploy reads by default) is one scenario 7 can run.
func TestShippedDaemonSetConverts(t *testing.T) {
	const shipped = "../../../../deploy"
	ds, src, err := readDaemonSet(shipped)
	if err != nil {
		t.Fatalf("readDaemonSet(%q) = %v", shipped, err)
	}
	ex, err := staticExporterPod(ds, testExporterOptions)
	if err != nil {
		t.Fatalf("staticExporterPod(%s) = %v", src, err)
	}
	if ex.interval <= 0 || !strings.HasSuffix(ex.readyURL, "/readyz") {
		t.Errorf("%s: interval %v, readiness %s", src, ex.interval, ex.readyURL)
	}
	// No ServiceAccount token in a static pod: its metrics are plain.
	args := ex.pod.Spec.Containers[0].Args
	if f, ok, err := lookupFlag(args, "secure-metrics-listen"); err != nil || (ok && f.value != "") {
		t.Errorf("%s: the static pod's args %q keep --secure-metrics-listen", src, args)
	}
	if err := agent.CheckServeArgs(args[1:]); err != nil {
		t.Errorf("%s: the static pod's args: %v", src, err)
	}
}

func TestWantedStatus(t *testing.T) {
	ds := testDaemonSet(t)
	ex, err := staticExporterPod(ds, testExporterOptions)
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in: uid 0, drop ALL + DAC_READ_SEARCH (bit 2), no
	// escalation, no seccomp profile.
	want := map[string]string{"Uid": "0", "CapEff": "0000000000000004", "CapPrm": "0000000000000004",
		"CapBnd": "0000000000000004", "CapAmb": "0000000000000000", "NoNewPrivs": "1"}
	if got, err := wantedStatus(ex.pod); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("wantedStatus = %v, %v; want %v", got, err, want)
	}
	ex.pod.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if got, _ := wantedStatus(ex.pod); got["Seccomp"] != "2" {
		t.Errorf("wantedStatus with a pod RuntimeDefault profile: Seccomp %q; want 2", got["Seccomp"])
	}
	sc := ex.pod.Spec.Containers[0].SecurityContext
	sc.Capabilities.Add = append(sc.Capabilities.Add, "CAP_SYS_ADMIN")
	if got, _ := wantedStatus(ex.pod); got["CapEff"] != "0000000000200004" || got["CapBnd"] != "0000000000200004" {
		t.Errorf("wantedStatus with SYS_ADMIN added: CapEff %q, CapBnd %q; want 0000000000200004", got["CapEff"], got["CapBnd"])
	}
	sc.Capabilities.Drop = nil
	if got, _ := wantedStatus(ex.pod); got["CapEff"] != "" {
		t.Errorf("wantedStatus without drop ALL pins CapEff %q; the runtime's default set is not the harness's to guess", got["CapEff"])
	}
	sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"BPF"}}
	if _, err := wantedStatus(ex.pod); err == nil {
		t.Errorf("wantedStatus with an unknown capability = nil error")
	}
}

func TestSetRootPropagation(t *testing.T) {
	ex, err := staticExporterPod(testDaemonSet(t), testExporterOptions)
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.setRootPropagation(corev1.MountPropagationNone); err != nil {
		t.Fatalf("setRootPropagation = %v", err)
	}
	if got := ex.pod.Spec.Containers[0].VolumeMounts[0].MountPropagation; got == nil || *got != corev1.MountPropagationNone {
		t.Errorf("propagation = %v; want None", got)
	}
	ex.root = "/elsewhere"
	if err := ex.setRootPropagation(corev1.MountPropagationNone); err == nil {
		t.Errorf("setRootPropagation with nothing at --root = nil error")
	}
}

// The scenario checks "/" against readOnlyRootFilesystem, as docs/e2e.md
// says, rather than only recording it.
func TestCheckRootFS(t *testing.T) {
	ds := testDaemonSet(t)
	ex, err := staticExporterPod(ds, testExporterOptions)
	if err != nil {
		t.Fatal(err)
	}
	sc := ex.pod.Spec.Containers[0].SecurityContext
	yes := true
	sc.ReadOnlyRootFilesystem = &yes
	if err := checkRootFS(ex.pod, &mountinfo.Info{Mountpoint: "/", Options: "ro,relatime"}); err != nil {
		t.Errorf("checkRootFS(/ ro) = %v; want nil", err)
	}
	if err := checkRootFS(ex.pod, &mountinfo.Info{Mountpoint: "/", Options: "rw,relatime"}); err == nil {
		t.Error("checkRootFS(/ rw) with readOnlyRootFilesystem = nil; want an error")
	}
	if err := checkRootFS(ex.pod, nil); err == nil {
		t.Error("checkRootFS(no /) with readOnlyRootFilesystem = nil; want an error")
	}
	sc.ReadOnlyRootFilesystem = nil
	if err := checkRootFS(ex.pod, &mountinfo.Info{Mountpoint: "/", Options: "rw"}); err != nil {
		t.Errorf("checkRootFS(/ rw) without readOnlyRootFilesystem = %v; want nil", err)
	}
}
