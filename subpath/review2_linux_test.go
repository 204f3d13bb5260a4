package subpath

// Findings of the second adversarial review of issue 10 (attacking the
// FUSE no-hang fix of 480ff39). Each test failed on the code before its fix.

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/mounttest"
)

// TestStalledFUSEHangsCheck: 480ff39 made emptydir's teardown
// look at a FUSE mount on the volume directory without asking its daemon,
// but the executor and the CLI ask subpath.Check first, and that path
// still asks: open opens the volume directory O_RDONLY (FUSE_OPENDIR) and
// volume-subpaths/<vol> O_RDONLY, examineIn/examineContainer open each
// container directory O_RDONLY (fsat.OpenDir) and statx each <index>
// entry with STATX_TYPE and no AT_STATX_DONT_SYNC (FUSE_GETATTR). The
// attacker only has to create volume-subpaths/<vol> (the pod directory is
// theirs) next to the FUSE mount of the first review's test, and every
// teardown blocks until the daemon dies.
func TestStalledFUSEHangsCheck(t *testing.T) {
	mounttest.RequireMounts(t)
	for _, where := range []string{"volume", "volume-subpaths/<vol>", "container", "index"} {
		t.Run(where, func(t *testing.T) {
			e := newEnv(t)
			mounttest.Build(t, e.subDir, "dir app/0")
			var target string
			switch where {
			case "volume":
				target = e.volDir
			case "volume-subpaths/<vol>":
				target = e.subDir
			case "container":
				target = filepath.Join(e.subDir, "app")
			case "index":
				target = filepath.Join(e.subDir, "app/0")
			}
			mounttest.StalledFUSE(t, "stalled", target, "040000")
			err := mounttest.Within(t, 5*time.Second, "subpath Check with a stalled FUSE mount on the "+where, func() error {
				return e.cleaner.Check(e.ctx, uid, emptydir.PluginName, "data")
			})
			t.Logf("Check = %v", err)
		})
	}
}
