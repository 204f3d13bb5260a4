package subpath

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nodevol/nodevol/emptydir"
	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
)

// TestCheckDoesNotAskStalledFUSE: the executor and the CLI ask
// subpath.Check before an emptyDir teardown, so Check must not ask a
// stalled FUSE mount anything either: on the volume directory, on
// volume-subpaths/<vol> (which the attacker can create, the pod directory
// being theirs), on a container directory or on an <index> entry, it
// returns without an O_RDONLY open (FUSE_OPENDIR) or a statx without
// AT_STATX_DONT_SYNC (FUSE_GETATTR).
func TestCheckDoesNotAskStalledFUSE(t *testing.T) {
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
