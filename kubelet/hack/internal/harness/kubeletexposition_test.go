package harness

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

// What a real kubelet wrote on /metrics in the e2e (the monitoring
// tests' fixture) parses with the e2e's reader, and the shipped rule's
// series is in it from the first failed TearDown on.
func TestKubeletExposition(t *testing.T) {
	sel, err := alertSelector(ruleFile("../../../../deploy"), kubeletTeardownAlert)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../../../monitoring/testdata/kubelet/*.prom.gz")
	if len(files) == 0 {
		t.Fatal("no monitoring/testdata/kubelet/*.prom.gz")
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m, err := parseMetrics(z)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, found := sel.sum(m)
		t.Logf("%s: %s = %g", filepath.Base(name), sel, v)
		if healthy := filepath.Base(name) == "nodevol-healthy.prom.gz" || filepath.Base(name) == "stock-healthy.prom.gz"; healthy == found {
			t.Errorf("%s: %s found %v", name, sel, found)
		}
	}
}
