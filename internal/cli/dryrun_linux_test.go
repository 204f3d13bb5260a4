package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestDryRunAgreesWithTeardown: `teardown --dry-run`, `scan` and the real
// teardown agree on each of these cases, and the teardown stops before
// changing anything (a dry run that promised a removal where the teardown
// then failed on every retry — in the metadata cases after removing the
// volume directory — would mislead the operator):
//
//   - a volume set up with a project quota (nodevol.json records
//     quotaProjectID): the CLI's plugin has no quota manager, TearDown
//     stops with "no quota manager is configured", PlanTearDown never
//     looks at it;
//   - an extra entry in the metadata directory (removeMetadata's final
//     rmdir fails with ENOTEMPTY);
//   - the ready marker replaced by a directory (unlink fails with EISDIR);
//   - a non-empty, unmounted subPath index directory (subpath.Check
//     passes, Clean's rmdir fails with ENOTEMPTY).
func TestDryRunAgreesWithTeardown(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, vol, metaDir, subDir string)
	}{
		{"quota project recorded", func(t *testing.T, vol, metaDir, _ string) {
			if err := os.WriteFile(filepath.Join(metaDir, "nodevol.json"), []byte(`{"medium":"Default","quotaProjectID":1048577}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"extra entry in the metadata directory", func(t *testing.T, vol, metaDir, _ string) {
			mounttest.Build(t, metaDir, "file planted x")
		}},
		{"ready marker is a directory", func(t *testing.T, vol, metaDir, _ string) {
			if err := os.Remove(filepath.Join(metaDir, "ready")); err != nil {
				t.Fatal(err)
			}
			mounttest.Build(t, metaDir, "dir ready")
		}},
		{"non-empty subPath index directory", func(t *testing.T, vol, metaDir, subDir string) {
			mounttest.Build(t, subDir, "file app/0/planted x")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := mounttest.RealTempDir(t)
			k := newKubelet(t, base)
			vol := k.setUp(t, testUID, "cache", volume.EmptyDirSource{})
			metaDir := filepath.Dir(k.ready(t, testUID, "cache"))
			subDir, err := k.layout.VolumeSubpathsDir(testUID, "cache")
			if err != nil {
				t.Fatal(err)
			}
			mounttest.Build(t, vol, "file pod-data x")
			c.plant(t, vol, metaDir, subDir)

			scan := nodevol(t, "scan", "--root", k.layout.Root())
			dry := nodevol(t, "teardown", allowForeign, "--dry-run", vol)
			real := nodevol(t, "teardown", allowForeign, vol)
			again := nodevol(t, "teardown", allowForeign, vol)
			if dry.code != real.code || scan.code != real.code {
				t.Errorf("scan exit %d, teardown --dry-run exit %d, teardown exit %d (retry: exit %d): the dry run does not say what the teardown does",
					scan.code, dry.code, real.code, again.code)
			}
			if _, err := os.Lstat(vol); real.code != 0 && os.IsNotExist(err) {
				t.Errorf("the failed teardown had already removed %s", vol)
			}
		})
	}
}
