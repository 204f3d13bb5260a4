package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestScanReasonsNameTheirOwnPlugin: verdict reasons are made once per
// plugin name and filesystem type, up to a bound, and the names are
// whoever writes in a pod directory's choice: with more plugins than the
// bound, some volumes mounted on and some not, every volume's reason names
// its own plugin (and a mounted one its own filesystem type), never
// another's.
func TestScanReasonsNameTheirOwnPlugin(t *testing.T) {
	mounttest.RequireMounts(t)
	k := newKubelet(t, mounttest.MemTempDir(t))
	const plugins = 2*maxReasonTexts + 10
	for i := range plugins {
		v := filepath.Join(k.root, "pods", testUID, "volumes", fmt.Sprintf("attacker.example~p%03d", i), "v")
		if err := os.MkdirAll(v, 0o755); err != nil {
			t.Fatal(err)
		}
		if i%50 == 7 {
			mounttest.Tmpfs(t, v, "size=1m")
		}
	}
	rep, err := scanRoot(k.root)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, v := range rep.volumes {
		if !strings.HasPrefix(v.Plugin, "attacker.example/") {
			continue
		}
		seen++
		if !strings.Contains(v.Reason, "a "+v.Plugin+" volume") {
			t.Errorf("%s (plugin %s): reason %q names another plugin", v.Path, v.Plugin, v.Reason)
		}
		var i int
		fmt.Sscanf(strings.TrimPrefix(v.Plugin, "attacker.example/p"), "%d", &i)
		if mounted := strings.Contains(v.Reason, "mounted on its own directory (tmpfs)"); mounted != (i%50 == 7) {
			t.Errorf("%s: reason %q; mounted on: %v", v.Path, v.Reason, i%50 == 7)
		}
	}
	if seen != plugins {
		t.Errorf("%d volumes of the %d plugins in the report", seen, plugins)
	}
}
