package volume

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyBaseHelpers checks what the package documentation says
// of its imports, for every OS's files: of nodevol, volume imports only
// the base helpers internal/base/fsat and internal/base/memsize, and they import
// nothing of nodevol.
func TestImportsOnlyBaseHelpers(t *testing.T) {
	const module = "github.com/nodevol/nodevol/"
	helpers := map[string]string{
		module + "internal/base/fsat":    "../internal/base/fsat",
		module + "internal/base/memsize": "../internal/base/memsize",
	}
	check := func(dir string, allowed map[string]string) {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if _, ok := allowed[p]; strings.HasPrefix(p, module) && !ok {
					t.Errorf("%s imports %s; the package doc says it imports no part of nodevol but %v", name, p, allowed)
				}
			}
		}
	}
	check(".", helpers)
	for _, dir := range helpers {
		check(dir, nil)
	}
}
