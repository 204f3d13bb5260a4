package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const testFileBase = "k8s.io/kubernetes@v1.37.2/"

func spec(file, text string, labels ...string) suiteSpec {
	return suiteSpec{Text: text, File: testFileBase + file, Labels: labels}
}

func TestSelectSpecs(t *testing.T) {
	all := []suiteSpec{
		spec("test/e2e/common/storage/empty_dir.go", "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [NodeConformance] [Conformance]", "sig-storage", "NodeConformance", "Conformance"),
		spec("test/e2e/common/storage/empty_dir.go", "[sig-storage] EmptyDir volumes when FSGroup is specified [LinuxOnly] [NodeFeature:FSGroup] new files should be created with FSGroup ownership when container is root", "sig-storage", "NodeFeature:FSGroup"),
		spec("test/e2e/common/storage/empty_dir.go", "[sig-storage] EmptyDir volumes EmptyDirVolumeMode [LinuxOnly] [Feature:EmptyDirVolumeMode] [FeatureGate:EmptyDirVolumeMode] [Alpha] [Feature:OffByDefault] should set mode 0750 on emptyDir directory", "sig-storage", "Feature:EmptyDirVolumeMode", "FeatureGate:EmptyDirVolumeMode", "Feature:OffByDefault", "Alpha", "Feature:OffByDefault"),
		spec("test/e2e/common/storage/secrets_volume.go", "[sig-storage] Secrets atomic writer [FeatureGate:AtomicWriteVolumeUserFields] [Feature:OffByDefault]", "sig-storage", "FeatureGate:AtomicWriteVolumeUserFields", "Feature:OffByDefault"),
		spec("test/e2e/common/storage/secrets_volume.go", "[sig-storage] Secrets off by default alone [Feature:OffByDefault]", "sig-storage", "Feature:OffByDefault"),
		spec("test/e2e/common/storage/configmap_volume.go", "[sig-storage] ConfigMap should be consumable [Slow]", "sig-storage", "Slow"),
		spec("test/e2e/common/storage/secrets_volume.go", "[sig-storage] Secrets should be consumable with a gate [FeatureGate:Other] [Beta]", "sig-storage", "FeatureGate:Other", "Beta"),
		spec("test/e2e/common/storage/projected_secret.go", "[sig-storage] Projected secret should be consumable with a feature [Feature:Other]", "sig-storage", "Feature:Other"),
		spec("test/e2e/common/storage/empty_dir.go", "[sig-storage] EmptyDir volumes both features [Feature:EmptyDirVolumeMode] [Feature:Other]", "Feature:EmptyDirVolumeMode", "Feature:Other"),
		spec("test/e2e/storage/subpath.go", "[sig-storage] Subpath Atomic writer volumes should support subpaths with secret pod [Conformance]", "sig-storage", "Conformance"),
		spec("test/e2e/storage/subpath.go", "[sig-storage] Subpath not conformance", "sig-storage"),
		spec("test/e2e/storage/empty_dir_wrapper.go", "[sig-storage] EmptyDir wrapper volumes should not cause race condition when used for configmaps [Serial] [Conformance]", "sig-storage", "Serial", "Conformance"),
		spec("test/e2e/storage/empty_dir_wrapper.go", "[sig-storage] EmptyDir wrapper volumes should not cause race condition when used for git_repo [Serial] [Slow]", "sig-storage", "Serial", "Slow", "FeatureGate:GitRepoVolumeDriver"),
		spec("test/e2e/common/node/configmap.go", "[sig-node] ConfigMap should be consumable via environment variable [Conformance]", "sig-node", "Conformance"),
		spec("test/e2e/storage/testsuites/subpath.go", "[sig-storage] In-tree Volumes subpath [Conformance]", "Conformance"),
	}
	var got []string
	for _, s := range selectSpecs(all) {
		got = append(got, s.Text)
	}
	want := []string{all[0].Text, all[1].Text, all[2].Text, all[9].Text, all[11].Text}
	if !slices.Equal(got, want) {
		t.Errorf("selected\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestFocusRegexp checks the focus against ginkgo's matching: the suite's
// description, a space, the spec's text, with every selected spec matched
// and no other, even one whose text extends a selected one's.
func TestFocusRegexp(t *testing.T) {
	sel := []suiteSpec{
		{Text: "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]"},
		{Text: "[sig-storage] Projected downwardAPI should provide podname only [NodeConformance] [Conformance]"},
		{Text: "[sig-storage] a|b *.? {1} $x ^y \\z"},
	}
	re := regexp.MustCompile(focusRegexp("Kubernetes e2e suite", sel))
	for _, s := range sel {
		if !re.MatchString("Kubernetes e2e suite " + s.Text) {
			t.Errorf("focus does not match %q", s.Text)
		}
	}
	for _, other := range []string{
		"Kubernetes e2e suite [sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance] and more",
		"Kubernetes e2e suite [sig-storage] EmptyDir volumes should support (root,0644,tmpfs)",
		"Kubernetes e2e suite [sig-storage] a",
		"Other suite [sig-storage] Projected downwardAPI should provide podname only [NodeConformance] [Conformance]",
	} {
		if re.MatchString(other) {
			t.Errorf("focus matches %q", other)
		}
	}
}

// TestReadGinkgoReport reads a report in ginkgo v2's JSON form (the fields
// read, as types.Report marshals them): only It nodes, labels of every
// container and the leaf, the texts joined by spaces.
func TestReadGinkgoReport(t *testing.T) {
	report := []map[string]any{{
		"SuiteDescription": "Kubernetes e2e suite",
		"SuiteSucceeded":   false,
		"SpecReports": []map[string]any{
			{"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
			{
				"ContainerHierarchyTexts":  []string{"[sig-storage] EmptyDir volumes", "when FSGroup is specified [LinuxOnly]"},
				"ContainerHierarchyLabels": [][]string{{"sig-storage"}, {"NodeFeature:FSGroup"}},
				"LeafNodeType":             "It",
				"LeafNodeLocation":         map[string]any{"FileName": testFileBase + "test/e2e/common/storage/empty_dir.go", "LineNumber": 52},
				"LeafNodeText":             "volume on default medium should have the correct mode using FSGroup",
				"LeafNodeLabels":           []string{},
				"State":                    "failed",
				"RunTime":                  2500000000,
				"Failure":                  map[string]any{"Message": "expected\nsomething"},
			},
		},
	}}
	b, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	desc, specs, err := readGinkgoReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if desc != "Kubernetes e2e suite" || len(specs) != 1 {
		t.Fatalf("description %q, %d specs", desc, len(specs))
	}
	s := specs[0]
	if s.Text != "[sig-storage] EmptyDir volumes when FSGroup is specified [LinuxOnly] volume on default medium should have the correct mode using FSGroup" ||
		s.Line != 52 || s.State != "failed" || s.Seconds != 2.5 || s.Message != "expected\nsomething" ||
		!slices.Equal(s.Labels, []string{"sig-storage", "NodeFeature:FSGroup"}) {
		t.Errorf("spec %+v", s)
	}
}

func TestConformanceProblems(t *testing.T) {
	a, b, c, d := "[sig-storage] A", "[sig-storage] B", "[sig-storage] C", "[sig-storage] D"
	res := &conformanceResult{
		Selected: []suiteSpec{{Text: a}, {Text: b}, {Text: c}, {Text: d}},
		Runs: []conformanceRun{
			{Kubelet: "stock", Specs: []suiteSpec{{Text: a, State: "passed"}, {Text: b, State: "failed"}, {Text: c, State: "passed"}, {Text: d, State: "skipped"}}},
			{Kubelet: "nodevol", Specs: []suiteSpec{{Text: a, State: "passed"}, {Text: b, State: "passed"}, {Text: c, State: "passed"}, {Text: d, State: "skipped"}}},
		},
	}
	if p := conformanceProblems(res); len(p) != 0 {
		t.Errorf("a stock failure nodevol passes, and a spec both skip: problems %q", p)
	}
	res.Runs[1].Specs[2].State = "failed"
	res.Runs[1].Specs[2].Message = "boom\nmore"
	res.Runs[1].Specs = slices.Delete(res.Runs[1].Specs, 0, 1)
	res.Runs[0].Specs[3].State = "passed"
	p := conformanceProblems(res)
	want := []string{
		a + ": not reported by the nodevol run",
		c + ": failed on nodevol: boom",
		d + ": skipped on nodevol, passed on stock: ",
	}
	slices.Sort(p)
	if !slices.Equal(p, want) {
		t.Errorf("problems\n\t%s\nwant\n\t%s", strings.Join(p, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestCNIConflist(t *testing.T) {
	b, err := cniConflist(2, "/work/node-2/cni/ipam")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string
		Plugins    []struct {
			Type      string
			Bridge    string
			IsGateway bool
			IPMasq    bool
			IPAM      struct {
				Type    string
				DataDir string
				Ranges  [][]struct{ Subnet, Gateway string }
			}
		}
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "loopback" {
		t.Fatalf("plugins %+v", conf.Plugins)
	}
	br := conf.Plugins[0]
	if !br.IsGateway || br.IPMasq || br.IPAM.Type != "host-local" || br.IPAM.DataDir != "/work/node-2/cni/ipam" ||
		len(br.IPAM.Ranges) != 1 || br.IPAM.Ranges[0][0].Subnet != "10.244.2.0/24" || br.IPAM.Ranges[0][0].Gateway != "10.244.2.1" {
		t.Errorf("bridge %+v", br)
	}
}

func TestFeatureGatesFlag(t *testing.T) {
	if got := featureGatesFlag(map[string]bool{"B": false, "A": true}); got != "A=true,B=false" {
		t.Errorf("got %q", got)
	}
}
