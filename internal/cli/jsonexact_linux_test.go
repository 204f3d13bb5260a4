package cli

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONExactNamesEveryCommand: two directories whose names differ only
// in bytes that are not UTF-8 ("v\xff" and "v\xfe") printed alike in
// every --json output ("v\ufffd"). Each command's JSON now tells them
// apart, and the exact form gives back the name byte for byte.
func TestJSONExactNamesEveryCommand(t *testing.T) {
	root := t.TempDir()
	vols := filepath.Join(root, "pods", testUID, "volumes", "kubernetes.io~empty-dir")
	names := []string{"v\xff", "v\xfe"}
	var paths []string
	for _, n := range names {
		p := filepath.Join(vols, n)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	// An entry that does not parse, named alike: a problem.
	if err := os.WriteFile(filepath.Join(root, "pods", "core\xff"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	exact := func(t *testing.T, obj map[string]any, key string) string {
		t.Helper()
		s, ok := obj[key+"Base64"].(string)
		if !ok {
			t.Fatalf("no %sBase64 in %v", key, obj)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		if obj[key] != strings.ToValidUTF8(string(b), "\ufffd") {
			t.Errorf("%s = %q, its exact form %q: not the same name", key, obj[key], b)
		}
		return string(b)
	}
	wantPaths := func(t *testing.T, objs []map[string]any, key string, want []string) {
		t.Helper()
		if len(objs) != len(want) {
			t.Fatalf("%d results; want %d", len(objs), len(want))
		}
		for i, obj := range objs {
			if got := exact(t, obj, key); got != want[i] {
				t.Errorf("result %d: %s is exactly %q; want %q", i, key, got, want[i])
			}
		}
	}
	lines := func(t *testing.T, out string) []map[string]any {
		t.Helper()
		var objs []map[string]any
		for line := range strings.Lines(out) {
			var obj map[string]any
			if err := json.Unmarshal([]byte(line), &obj); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			objs = append(objs, obj)
		}
		return objs
	}

	t.Run("scan", func(t *testing.T) {
		r := nodevol(t, "scan", "--json", "--root", root)
		var volumes, problems []map[string]any
		for _, obj := range lines(t, r.stdout) {
			if _, ok := obj["problem"]; ok {
				problems = append(problems, obj)
			} else {
				volumes = append(volumes, obj)
			}
		}
		// Listed in byte order: v\xfe before v\xff.
		wantPaths(t, volumes, "path", []string{paths[1], paths[0]})
		if exact(t, volumes[0], "volume") != "v\xfe" || exact(t, volumes[1], "volume") != "v\xff" {
			t.Errorf("volume names not exact: %v", volumes)
		}
		wantPaths(t, problems, "problem", []string{filepath.Join(root, "pods", "core\xff")})
	})
	t.Run("check", func(t *testing.T) {
		r := nodevol(t, append([]string{"check", "--json"}, paths...)...)
		wantPaths(t, lines(t, r.stdout), "path", paths)
	})
	t.Run("usage", func(t *testing.T) {
		r := nodevol(t, append([]string{"usage", "--json"}, paths...)...)
		wantPaths(t, lines(t, r.stdout), "path", paths)
	})
	t.Run("rm", func(t *testing.T) {
		r := nodevol(t, append([]string{"rm", "--dry-run", "--json", "--allow-foreign-mount-namespace"}, paths...)...)
		wantPaths(t, lines(t, r.stdout), "path", paths)
	})
	t.Run("teardown", func(t *testing.T) {
		r := nodevol(t, append([]string{"teardown", "--dry-run", "--json", "--allow-foreign-mount-namespace"}, paths...)...)
		objs := lines(t, r.stdout)
		wantPaths(t, objs, "path", paths)
	})
}
