package harness

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodevol/nodevol/internal/tools/ociimage"
)

// Log lines as kubelet v1.37.2 writes them (shortened paths): a stock
// EBUSY after RemoveAll emptied the NAS, two nodevol refusals, a success.
const (
	testUID      = "0de0e2e0-0000-4000-8000-000100000001"
	stockFailure = `E1123 16:10:55.804218     235 nestedpendingoperations.go:348] Operation for "{volumeName:kubernetes.io/empty-dir/` + testUID + `-scratch podName:` + testUID + ` nodeName:}" failed. No retries permitted until 2026-11-23 16:10:56.304131964 +0000 UTC m=+4.942276040 (durationBeforeRetry 500ms). Error: UnmountVolume.TearDown failed for volume "kubernetes.io/empty-dir/` + testUID + `-scratch" (UniqueName: "kubernetes.io/empty-dir/` + testUID + `-scratch") pod "` + testUID + `" (UID: "` + testUID + `") : unlinkat /root/pods/` + testUID + `/volumes/kubernetes.io~empty-dir/scratch/nas: device or resource busy`
	refusal      = `E1123 16:10:55.804218     235 nestedpendingoperations.go:348] Operation for "{volumeName:kubernetes.io/empty-dir/` + testUID + `-scratch podName:` + testUID + ` nodeName:}" failed. No retries permitted until 2026-11-23 16:10:56.304131964 +0000 UTC m=+4.942276040 (durationBeforeRetry DELAY). Error: UnmountVolume.TearDown failed for volume "kubernetes.io/empty-dir/` + testUID + `-scratch" (UniqueName: "kubernetes.io/empty-dir/` + testUID + `-scratch") pod "` + testUID + `" (UID: "` + testUID + `") : TearDown /root/pods/` + testUID + `/volumes/kubernetes.io~empty-dir/scratch (transient): emptyDir teardown of /root/pods/` + testUID + `/volumes/kubernetes.io~empty-dir/scratch refused: 1 mount beneath the volume: refusing to remove /root/pods/` + testUID + `/volumes/kubernetes.io~empty-dir/scratch: crosses a mount boundary (nothing was deleted): /root/pods/` + testUID + `/volumes/kubernetes.io~empty-dir/scratch/nas (tmpfs from e2e-nas)`
	success      = `I1123 16:10:57.325370     235 operation_generator.go:791] UnmountVolume.TearDown succeeded for volume "kubernetes.io/empty-dir/` + testUID + `-scratch" pod "` + testUID + `" (UID: "` + testUID + `"). InnerVolumeSpecName "scratch". PluginName "kubernetes.io/empty-dir", VolumeGIDValue ""`
	otherVolume  = `E1123 16:10:55.804218     235 nestedpendingoperations.go:348] Operation for "{volumeName:kubernetes.io/empty-dir/` + testUID + `-other}" failed. (durationBeforeRetry 500ms). Error: UnmountVolume.TearDown failed for volume "kubernetes.io/empty-dir/` + testUID + `-other" (UniqueName: "x") : refused`
)

func TestTeardownAttempts(t *testing.T) {
	nas := "/root/pods/" + testUID + "/volumes/kubernetes.io~empty-dir/scratch/nas"
	tests := []struct {
		name        string
		log         []string
		failures    int
		delays      string
		succeeded   bool
		refuses     bool // every failure is nodevol's refusal naming the NAS
		wantInFirst string
	}{
		{
			name:     "stock EBUSY",
			log:      []string{"I1123 unrelated line", stockFailure, otherVolume},
			failures: 1, delays: "500ms",
			wantInFirst: "unlinkat $ROOT/pods/",
		},
		{
			name: "nodevol refusals then success",
			log: []string{
				strings.Replace(refusal, "DELAY", "500ms", 1), otherVolume,
				strings.Replace(refusal, "DELAY", "1s", 1), success,
			},
			failures: 2, delays: "500ms,1s", succeeded: true, refuses: true,
			wantInFirst: "emptyDir teardown of $ROOT/pods/",
		},
		{
			name: "a refusal, then a failure that is not one",
			log: []string{
				strings.Replace(refusal, "DELAY", "500ms", 1),
				strings.Replace(stockFailure, "500ms", "1s", 1),
			},
			failures: 2, delays: "500ms,1s",
			wantInFirst: "emptyDir teardown of $ROOT/pods/",
		},
		{name: "nothing yet", log: []string{otherVolume}},
	}
	pod := &corev1.Pod{}
	pod.UID = types.UID(testUID)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			k := &kubelet{logPath: filepath.Join(dir, "kubelet.log")}
			if err := os.WriteFile(k.logPath, []byte("before the removal "+stockFailure+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			offset, err := k.logSize()
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(k.logPath, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Everything but a half-written last line: read must leave that for later.
			_, err = io.WriteString(f, strings.Join(tt.log, "\n")+"\n"+stockFailure[:40])
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			a := teardownAttempts{re: teardownLine(pod, scratchVolume)}
			if err := a.read(k, offset); err != nil {
				t.Fatal(err)
			}
			if got := a.failures(); got != tt.failures {
				t.Errorf("failures() = %d; want %d (lines %q)", got, tt.failures, a.lines)
			}
			if got := strings.Join(a.delays(), ","); got != tt.delays {
				t.Errorf("delays() = %q; want %q", got, tt.delays)
			}
			if got := a.succeeded(); got != tt.succeeded {
				t.Errorf("succeeded() = %v; want %v", got, tt.succeeded)
			}
			if got := a.everyFailureRefuses(nas); got != tt.refuses {
				t.Errorf("everyFailureRefuses(%q) = %v; want %v", nas, got, tt.refuses)
			}
			if got := a.firstFailure("/root"); !strings.Contains(got, tt.wantInFirst) {
				t.Errorf("firstFailure() = %q; want it to contain %q", got, tt.wantInFirst)
			}
		})
	}
}

// TestWriteOCILayout reads the tarball back as containerd would: the
// index names the image and points at the manifest, every blob is stored
// under its digest, the config's diff_id is the layer's digest, and the
// layer holds the files and symlinks.
func TestWriteOCILayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	spec := imageSpec{
		Name:       "docker.io/library/test:1.0",
		Entrypoint: []string{"/bin/prog"},
		Files:      []imageFile{{HostPath: bin, ImagePath: "/bin/prog", Mode: 0o755}},
		Symlinks:   map[string]string{"/bin/sh": "prog"},
	}
	if err := writeOCILayout(out, spec); err != nil {
		t.Fatalf("writeOCILayout(%q) = %v", out, err)
	}
	files := readTar(t, out)
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", got)
	}
	for name, data := range files {
		if digest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != digest {
				t.Errorf("blob %s holds content of digest %x", name, sum)
			}
		}
	}
	var index struct {
		Manifests []ociimage.Descriptor `json:"manifests"`
	}
	mustUnmarshal(t, files["index.json"], &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != spec.Name {
		t.Fatalf("index.json = %s; want one manifest named %s", files["index.json"], spec.Name)
	}
	var manifest struct {
		Config ociimage.Descriptor   `json:"config"`
		Layers []ociimage.Descriptor `json:"layers"`
	}
	mustUnmarshal(t, blob(t, files, index.Manifests[0].Digest), &manifest)
	var config struct {
		Config struct{ Entrypoint []string } `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	mustUnmarshal(t, blob(t, files, manifest.Config.Digest), &config)
	if len(manifest.Layers) != 1 || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Fatalf("manifest layers %v, config diff_ids %v: want one, the same", manifest.Layers, config.RootFS.DiffIDs)
	}
	if got := strings.Join(config.Config.Entrypoint, " "); got != "/bin/prog" {
		t.Errorf("entrypoint = %q; want /bin/prog", got)
	}
	layer := filepath.Join(dir, "layer.tar")
	if err := os.WriteFile(layer, blob(t, files, manifest.Layers[0].Digest), 0o644); err != nil {
		t.Fatal(err)
	}
	hdrs := readTarHeaders(t, layer)
	if h := hdrs["bin/prog"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o755 {
		t.Errorf("layer bin/prog = %+v; want a regular file, mode 0755", h)
	}
	if h := hdrs["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "prog" {
		t.Errorf("layer bin/sh = %+v; want a symlink to prog", h)
	}
	if h := hdrs["bin/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("layer bin/ = %+v; want a directory", h)
	}
}

func blob(t *testing.T, files map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("no blob %s", digest)
	}
	return b
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("json.Unmarshal(%s) = %v", b, err)
	}
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

func readTarHeaders(t *testing.T, path string) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdrs := map[string]*tar.Header{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name] = h
	}
}

func TestTimingTable(t *testing.T) {
	rows := []row{
		{Scenario: "1-a", Kubelet: "stock", Timings: []timing{{"x", 1500 * time.Millisecond}, {"y", time.Second}}},
		{Scenario: "1-a", Kubelet: "nodevol", Timings: []timing{{"x", 2 * time.Second}}},
	}
	got := timingTable(rows)
	if len(got) != 2 || got[0].step != "x" || got[0].by["stock"] != "1.500" || got[0].by["nodevol"] != "2.000" || got[1].by["nodevol"] != "" {
		t.Errorf("timingTable = %+v %+v", got[0], got[1])
	}
}

func TestCompareHost(t *testing.T) {
	before := hostState{
		Mounts:    []string{"/ ext4 /dev/vda"},
		Sysctls:   map[string]string{"kernel/panic": "0"},
		Dirs:      map[string]bool{"/run/containerd": false},
		Processes: []string{"7 go run ./hack/e2e -workdir /w"},
	}
	if err := compareHost(before, before, "/w"); err != nil {
		t.Errorf("compareHost(same) = %v; want nil", err)
	}
	after := hostState{
		Mounts:    []string{"/ ext4 /dev/vda", "/w/x tmpfs e2e-nas", "/mnt/other tmpfs tmpfs"},
		Sysctls:   map[string]string{"kernel/panic": "10"},
		Dirs:      map[string]bool{"/run/containerd": true},
		Processes: []string{"7 go run ./hack/e2e -workdir /w", "9 containerd --config /w/c.toml"},
	}
	err := compareHost(before, after, "/w")
	var le *LeftoversError
	if !errors.As(err, &le) || len(le.Items) != 4 {
		t.Fatalf("compareHost = %v; want a *LeftoversError with 4 items (mount, sysctl, directory, process; not the unrelated mount)", err)
	}
}

func TestTeardownSpan(t *testing.T) {
	uid := "0de0e2e0-0000-4000-8000-000100000006"
	log := `I1123 16:13:43.384469     237 reconciler_common.go:225] "operationExecutor.MountVolume started for volume \"scratch\" (UniqueName: \"kubernetes.io/empty-dir/` + uid + `-scratch\")"
I1123 16:13:47.038289     237 reconciler_common.go:163] "operationExecutor.UnmountVolume started for volume \"kubernetes.io/empty-dir/` + uid + `-scratch\" (UniqueName: \"kubernetes.io/empty-dir/` + uid + `-scratch\") pod \"` + uid + `\""
I1123 16:13:47.079679     237 operation_generator.go:791] UnmountVolume.TearDown succeeded for volume "kubernetes.io/empty-dir/` + uid + `-scratch" pod "` + uid + `" (UID: "` + uid + `"). InnerVolumeSpecName "scratch".
`
	k := &kubelet{logPath: filepath.Join(t.TempDir(), "kubelet.log")}
	if err := os.WriteFile(k.logPath, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	pod.UID = types.UID(uid)
	got, err := k.teardownSpan(0, pod, scratchVolume)
	if want := 41390 * time.Microsecond; err != nil || got != want {
		t.Errorf("teardownSpan = %v, %v; want %v", got, err, want)
	}
	pod.UID = "other"
	if _, err := k.teardownSpan(0, pod, scratchVolume); err == nil {
		t.Errorf("teardownSpan(another pod) = nil error; want one")
	}
}

func TestParseListening(t *testing.T) {
	// /proc/net/tcp with an etcd client port listening, an established
	// connection to it, and another port listening.
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C350 0100007F:094B 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
`
	got := parseListening("tcp", table, controlPlanePorts)
	if want := []string{"tcp 2379"}; !slices.Equal(got, want) {
		t.Errorf("parseListening = %q; want %q", got, want)
	}
}

func TestLockHost(t *testing.T) {
	log := newLogger(io.Discard, time.Now(), "")
	name := fmt.Sprintf("%s-test-%d", hostLockName, os.Getpid()) // not a real run's lock
	release, err := lockHost(t.Context(), name, log)
	if err != nil {
		t.Fatalf("lockHost = %v; want the lock", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := lockHost(ctx, name, log); err == nil {
		t.Fatal("a second lockHost got the lock while the first held it")
	}
	release()
	release2, err := lockHost(t.Context(), name, log)
	if err != nil {
		t.Fatalf("lockHost after release = %v; want the lock", err)
	}
	release2()
}

func TestParseTokenClaims(t *testing.T) {
	claims := `{"aud":["nodevol-e2e"],"exp":1,"kubernetes.io":{"namespace":"default","pod":{"name":"p","uid":"u-1"},"serviceaccount":{"name":"default","uid":"s"}},"sub":"system:serviceaccount:default:default"}`
	jwt := "eyJhbGciOiJFUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln\n"
	c, err := parseTokenClaims(jwt)
	if err != nil {
		t.Fatalf("parseTokenClaims = %v", err)
	}
	if !slices.Equal(c.Audience, []string{tokenAudience}) || c.Subject != "system:serviceaccount:default:default" || c.Kubernetes.Pod.UID != "u-1" || c.Kubernetes.Pod.Name != "p" {
		t.Errorf("parseTokenClaims = %+v", c)
	}
	for _, bad := range []string{"", "a.b", "a.!!.c", "a." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".c"} {
		if _, err := parseTokenClaims(bad); err == nil {
			t.Errorf("parseTokenClaims(%q) = nil error; want one", bad)
		}
	}
}

func TestCountFailedUnmounts(t *testing.T) {
	// Lines as kubelet v1.37.2's /metrics writes them (labels sorted).
	const text = `# HELP storage_operation_duration_seconds [BETA] Storage operation duration
# TYPE storage_operation_duration_seconds histogram
storage_operation_duration_seconds_bucket{migrated="false",operation_name="volume_unmount",status="fail-unknown",volume_plugin="kubernetes.io/empty-dir",le="0.1"} 3
storage_operation_duration_seconds_sum{migrated="false",operation_name="volume_unmount",status="fail-unknown",volume_plugin="kubernetes.io/empty-dir"} 0.04
storage_operation_duration_seconds_count{migrated="false",operation_name="volume_unmount",status="fail-unknown",volume_plugin="kubernetes.io/empty-dir"} 3
storage_operation_duration_seconds_count{migrated="true",operation_name="volume_unmount",status="fail-unknown",volume_plugin="kubernetes.io/empty-dir"} 1
storage_operation_duration_seconds_count{migrated="false",operation_name="volume_unmount",status="success",volume_plugin="kubernetes.io/empty-dir"} 7
storage_operation_duration_seconds_count{migrated="false",operation_name="volume_mount",status="fail-unknown",volume_plugin="kubernetes.io/empty-dir"} 2
storage_operation_duration_seconds_count{migrated="false",operation_name="volume_unmount",status="fail-unknown",volume_plugin="kubernetes.io/downward-api"} 5
`
	n, err := countFailedUnmounts(strings.NewReader(text), "kubernetes.io/empty-dir", "kubernetes.io/downward-api", "kubernetes.io/csi:x")
	if err != nil || !slices.Equal(n, []float64{4, 5, 0}) {
		t.Fatalf("countFailedUnmounts = %v, %v; want [4 5 0], nil", n, err)
	}
	if _, err := countFailedUnmounts(strings.NewReader(`storage_operation_duration_seconds_count{operation_name="volume_unmount",status="fail-unknown",volume_plugin="kubernetes.io/empty-dir"} x`+"\n"), "kubernetes.io/empty-dir"); err == nil {
		t.Fatal("a value that is not a number was accepted")
	}
}

func TestDelaysGrow(t *testing.T) {
	for _, tt := range []struct {
		delays []string
		want   bool
	}{
		{[]string{"500ms", "1s"}, true},
		{[]string{"500ms", "1s", "2s", "1m4s", "2m2s"}, true},
		{[]string{"500ms"}, false},
		{nil, false},
		{[]string{"1s", "1s"}, false},
		{[]string{"1s", "500ms"}, false},
		{[]string{"500ms", "soon"}, false},
	} {
		if got := delaysGrow(tt.delays); got != tt.want {
			t.Errorf("delaysGrow(%q) = %v; want %v", tt.delays, got, tt.want)
		}
	}
}
