// Package treespec builds directory trees from lines of a tiny language,
// for test fixtures (internal/testsupport/mounttest.Build) and the benchmark's node
// (internal/testsupport/nodefixture):
//
//	"dir a/b"                 a directory (parents created)
//	"file a/b/c content..."   a file with the rest of the line as content
//	"symlink a/l /target"     a symlink
package treespec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Build creates the entries specs describe under dir, in order, and
// stops at the first that fails, saying which.
func Build(dir string, specs ...string) error {
	for _, spec := range specs {
		kind, rest, _ := strings.Cut(spec, " ")
		name, arg, _ := strings.Cut(rest, " ")
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("%q: %w", spec, err)
		}
		var err error
		switch kind {
		case "dir":
			err = os.MkdirAll(p, 0o755)
		case "file":
			err = os.WriteFile(p, []byte(arg), 0o644)
		case "symlink":
			err = os.Symlink(arg, p)
		default:
			err = fmt.Errorf("unknown kind %q (want dir, file or symlink)", kind)
		}
		if err != nil {
			return fmt.Errorf("%q: %w", spec, err)
		}
	}
	return nil
}
