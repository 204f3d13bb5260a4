package emptydir_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const (
	upstreamPath = "k8s.io/kubernetes/pkg/volume/emptydir"
	oursPath     = "github.com/nodevol/nodevol/kubelet/kubeletpatch/emptydir"
)

// TestUpstreamExports checks that this package can stand in for upstream's
// pkg/volume/emptydir at the version kubelet/go.mod pins: every exported
// top-level identifier declared in upstream's non-test files (for any
// GOOS) exists here with the same kind, and, as the compiler sees both
// packages for this GOOS, with an identical type — and the same value, for
// a constant. A Kubernetes version whose package exports something new
// fails here, before a kubelet build that uses it does.
func TestUpstreamExports(t *testing.T) {
	exports := exportData(t, upstreamPath, oursPath)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(f)
	})
	upstream, err := imp.Import(upstreamPath)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := imp.Import(oursPath)
	if err != nil {
		t.Fatal(err)
	}

	declared := declaredExports(t, packageDir(t, upstreamPath))
	if len(declared) == 0 {
		t.Fatalf("found no exported identifiers in %s: the parsing is broken", upstreamPath)
	}
	for _, name := range sortedKeys(declared) {
		kind := declared[name]
		o := ours.Scope().Lookup(name)
		if o == nil {
			t.Errorf("upstream's %s %s.%s is missing here", kind, upstreamPath, name)
			continue
		}
		if got := objectKind(o); got != kind {
			t.Errorf("%s is a %s here; upstream's is a %s", name, got, kind)
			continue
		}
		if u := upstream.Scope().Lookup(name); u != nil {
			if err := compatible(u, o); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// compatible reports how ours differs from upstream's object of the same
// name and kind, as the kubelet's code would notice it.
func compatible(upstream, ours types.Object) error {
	switch u := upstream.(type) {
	case *types.Const:
		o := ours.(*types.Const)
		if !types.Identical(u.Type(), o.Type()) {
			return fmt.Errorf("type %s here; upstream's is %s", o.Type(), u.Type())
		}
		if !constant.Compare(u.Val(), token.EQL, o.Val()) {
			return fmt.Errorf("value %s here; upstream's is %s", o.Val(), u.Val())
		}
	case *types.TypeName:
		o := ours.(*types.TypeName)
		if u.IsAlias() != o.IsAlias() {
			return fmt.Errorf("alias %t here; upstream's %t", o.IsAlias(), u.IsAlias())
		}
		if !types.Identical(u.Type().Underlying(), o.Type().Underlying()) {
			return fmt.Errorf("underlying type %s here; upstream's is %s", o.Type().Underlying(), u.Type().Underlying())
		}
		uset, oset := types.NewMethodSet(types.NewPointer(u.Type())), types.NewMethodSet(types.NewPointer(o.Type()))
		for i := range uset.Len() {
			m := uset.At(i).Obj().(*types.Func)
			if !m.Exported() {
				continue
			}
			sel := oset.Lookup(m.Pkg(), m.Name())
			if sel == nil {
				sel = oset.Lookup(o.Pkg(), m.Name())
			}
			if sel == nil || !types.Identical(withoutRecv(m), withoutRecv(sel.Obj().(*types.Func))) {
				return fmt.Errorf("method %s is missing here or has another signature", m.Name())
			}
		}
	default: // *types.Var, *types.Func
		if !types.Identical(withoutRecv(upstream), withoutRecv(ours)) {
			return fmt.Errorf("type %s here; upstream's is %s", ours.Type(), upstream.Type())
		}
	}
	return nil
}

// withoutRecv is an object's type, a method's signature without its
// receiver (which names its own package's type).
func withoutRecv(o types.Object) types.Type {
	sig, ok := o.Type().(*types.Signature)
	if !ok || sig.Recv() == nil {
		return o.Type()
	}
	return types.NewSignatureType(nil, nil, nil, sig.Params(), sig.Results(), sig.Variadic())
}

func objectKind(o types.Object) string {
	switch o.(type) {
	case *types.Const:
		return "const"
	case *types.Var:
		return "var"
	case *types.Func:
		return "func"
	case *types.TypeName:
		return "type"
	}
	return fmt.Sprintf("%T", o)
}

// declaredExports parses every non-test .go file in dir, whatever its build
// constraints, and returns its exported top-level names and their kinds.
func declaredExports(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					out[d.Name.Name] = "func"
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							out[s.Name.Name] = "type"
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								out[n.Name] = map[token.Token]string{token.CONST: "const", token.VAR: "var"}[d.Tok]
							}
						}
					}
				}
			}
		}
	}
	return out
}

// packageDir is the directory of a package at the version kubelet/go.mod
// selects: for upstream's, its copy in the module cache.
func packageDir(t *testing.T, pkg string) string {
	t.Helper()
	out := goCmd(t, "list", "-f", "{{.Dir}}", pkg)
	return strings.TrimSpace(string(out))
}

// exportData returns the export data files of pkgs and their dependencies
// by import path, as go list -export builds them.
func exportData(t *testing.T, pkgs ...string) map[string]string {
	t.Helper()
	out := goCmd(t, append([]string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}"}, pkgs...)...)
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "="); ok {
			m[path] = file
		}
	}
	return m
}

func goCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
