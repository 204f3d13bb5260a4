package emptydir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodevol/nodevol/internal/testsupport/mounttest"
	"github.com/nodevol/nodevol/volume"
)

// TestPlanListedMetadataParentIsPlanTearDown: PlanListed, which opens
// each metadata directory from the pod directory by its whole path in
// one openat2, plans what PlanTearDown plans by name (the same errors,
// records and plans) whatever stands where the metadata-parent directory
// (plugins/kubernetes.io~empty-dir), plugins or a metadata directory
// belongs: missing, a symlink (to a directory holding a forged record),
// a file, another mount.
func TestPlanListedMetadataParentIsPlanTearDown(t *testing.T) {
	mounttest.RequireMounts(t)
	// forge makes a directory holding a metadata directory of cache with
	// a record, as a symlink or mount would show it.
	var record []byte // cache's, read before each case changes anything
	forge := func(t *testing.T, e *env, at string) {
		t.Helper()
		meta := filepath.Base(e.metaDir(t, "cache"))
		if err := os.MkdirAll(filepath.Join(at, meta), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(at, meta, metaFileName), record, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	replace := func(t *testing.T, path string, with func(string)) {
		t.Helper()
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
		with(path)
	}
	cases := []struct {
		name string
		mk   func(t *testing.T, e *env, metaParent, plugins string)
	}{
		{"metadata parent missing", func(t *testing.T, e *env, metaParent, _ string) {
			replace(t, metaParent, func(string) {})
		}},
		{"plugins missing", func(t *testing.T, e *env, _, plugins string) {
			replace(t, plugins, func(string) {})
		}},
		{"metadata parent a symlink", func(t *testing.T, e *env, metaParent, _ string) {
			elsewhere := t.TempDir()
			forge(t, e, elsewhere)
			replace(t, metaParent, func(p string) {
				if err := os.Symlink(elsewhere, p); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"plugins a symlink", func(t *testing.T, e *env, _, plugins string) {
			elsewhere := t.TempDir()
			forge(t, e, filepath.Join(elsewhere, escapedPluginName))
			replace(t, plugins, func(p string) {
				if err := os.Symlink(elsewhere, p); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"metadata parent a file", func(t *testing.T, e *env, metaParent, _ string) {
			replace(t, metaParent, func(p string) {
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"plugins a file", func(t *testing.T, e *env, _, plugins string) {
			replace(t, plugins, func(p string) {
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"metadata parent another mount", func(t *testing.T, e *env, metaParent, _ string) {
			mounttest.Tmpfs(t, metaParent, "")
			forge(t, e, metaParent)
		}},
		{"plugins another mount", func(t *testing.T, e *env, _, plugins string) {
			mounttest.Tmpfs(t, plugins, "")
			forge(t, e, filepath.Join(plugins, escapedPluginName))
		}},
		{"metadata directory a symlink", func(t *testing.T, e *env, metaParent, _ string) {
			elsewhere := t.TempDir()
			forge(t, e, elsewhere)
			meta := filepath.Base(e.metaDir(t, "cache"))
			replace(t, filepath.Join(metaParent, meta), func(p string) {
				if err := os.Symlink(filepath.Join(elsewhere, meta), p); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"metadata directory another mount", func(t *testing.T, e *env, metaParent, _ string) {
			mounttest.Tmpfs(t, filepath.Join(metaParent, filepath.Base(e.metaDir(t, "cache"))), "")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, t.TempDir(), nil)
			pod := e.pod(emptyDirSpec("cache", volume.StorageMediumDefault))
			e.setUp(t, pod, "cache")
			var err error
			if record, err = os.ReadFile(filepath.Join(e.metaDir(t, "cache"), metaFileName)); err != nil {
				t.Fatal(err)
			}
			metaParent := filepath.Dir(e.metaDir(t, "cache"))
			c.mk(t, e, metaParent, filepath.Dir(metaParent))
			planned := e.planBothWays(t, e, func(vd volume.VolumeDir, got Plan) {
				if got.meta != nil {
					t.Errorf("%s: a record read through %s", vd.Volume, c.name)
				}
			})
			if planned != 1 {
				t.Errorf("%d volumes planned, want 1", planned)
			}
		})
	}
}
