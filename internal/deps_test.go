// Package internal holds no code of its own: its subdirectories are sorted
// by who may import them, and this test enforces that, the way Go's
// go/build deps_test.go enforces the standard library's layering. The
// rules and their reasons are in docs/layout.md.
package internal

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nodevol/nodevol"

// Groups of packages, by path below the root module's path. A pattern
// ending in "/..." matches the directory and everything below it.
var (
	// base imports nothing of nodevol; anyone may import it.
	base = []string{"internal/base/..."}
	// public is the root module's supported API: what a program outside
	// the three modules may import, and all the csi/ and kubelet/ modules'
	// production code may import of the root module.
	public = []string{
		"mountdetect", "volume", "fsquota", "emptydir", "subpath",
		"reconciler", "reconciler/pendingops", "httpserver", "httpserver/kubeauth",
	}
	// testsupport may be imported by tests and hack/ only.
	testsupport = []string{"internal/testsupport/..."}
	// tools may be imported by hack/ directories and tests only.
	tools = []string{"internal/tools/..."}
)

// rule says which nodevol packages a package's non-test files may import.
type rule struct {
	pkgs   []string // the importing packages
	may    []string // what their non-test files may import
	tests  []string // what their test files may import besides
	reason string
}

func list(groups ...[]string) []string { return slices.Concat(groups...) }

// rules is the table of allowed imports. Every package of the three
// modules must match exactly one entry's pkgs (a new package fails the
// test until it is placed). Imports of a package by itself, of the
// standard library and of other modules are not checked here (go.mod
// decides those).
var rules = []rule{
	// Base helpers: system calls on descriptors, sizes, plurals, a
	// capped error list, the private-namespace runner, the names of the
	// crash points, the table of entry points packages offer each other
	// (friend). They stand under everything, so they import nothing of
	// nodevol but each other.
	{pkgs: base, may: list(base), tests: list(testsupport),
		reason: "base helpers import nothing of nodevol but base helpers"},

	// The library, layer by layer (lower layers first).
	{pkgs: []string{"httpserver/kubeauth", "reconciler/pendingops"}, may: nil,
		tests: list(testsupport), reason: "stands alone"},
	{pkgs: []string{"httpserver"}, may: []string{"httpserver/kubeauth"},
		tests: list(testsupport), reason: "serves HTTP, authorizing through kubeauth"},
	{pkgs: []string{"mountdetect", "volume"}, may: list(base),
		tests: list(testsupport), reason: "the safety core and the plugin API stand on base helpers only"},
	{pkgs: []string{"fsquota"}, may: list(base, []string{"mountdetect"}),
		tests: list(testsupport), reason: "quotas ask mountdetect which filesystem a directory is on"},
	{pkgs: []string{"subpath"}, may: list(base, []string{"mountdetect", "volume"}),
		tests: list(testsupport, public), reason: "a plugin helper"},
	{pkgs: []string{"emptydir"}, may: list(base, []string{"mountdetect", "volume", "fsquota"}),
		tests: list(testsupport, public), reason: "a plugin"},
	{pkgs: []string{"internal/executor"}, may: list(base, []string{"volume", "reconciler/pendingops"}),
		tests: list(testsupport, public), reason: "runs the operations the reconciler and the CLI start"},
	{pkgs: []string{"reconciler"}, may: list(base, []string{"mountdetect", "volume", "subpath", "reconciler/pendingops", "internal/executor"}),
		tests: list(testsupport, public), reason: "the volume manager, on top of the plugins' API"},

	// The product: the CLI and its commands (scan, rm, ...), the agent,
	// their mains, the demo.
	{pkgs: []string{"internal/cli"}, may: list(base, public, []string{"internal/executor"}),
		tests: list(testsupport), reason: "the nodevol command"},
	{pkgs: []string{"internal/agent"}, may: list(base, public, []string{"internal/cli"}),
		tests: list(testsupport), reason: "the node agent (nodevol-agent), which shares the CLI's scan"},
	{pkgs: []string{"cmd/nodevol"}, may: []string{"internal/cli"},
		reason: "main only calls the command table"},
	{pkgs: []string{"cmd/nodevol-agent"}, may: []string{"internal/agent"},
		reason: "main only calls the agent"},
	{pkgs: []string{"cmd/nodevol-demo"}, may: list(base, public, []string{"internal/cli"}),
		tests: list(testsupport), reason: "the demo runs the library and the CLI's scan"},

	// This test.
	{pkgs: []string{"internal"}, may: nil, reason: "holds only this test"},
	// The monitoring/ module: only tests of the alerting rules and the
	// dashboard, which build and run the agent and the driver as programs
	// and mount with test support.
	{pkgs: []string{"monitoring/..."}, may: nil, tests: list(testsupport),
		reason: "holds only tests of the monitoring rules"},

	// Test support and tools.
	{pkgs: testsupport, may: list(base, public, testsupport),
		reason: "test support builds fixtures with the library"},
	{pkgs: tools, may: list(base), tests: list(testsupport),
		reason: "tools know nothing of volumes"},
	{pkgs: []string{"hack/..."}, may: list(base, public, testsupport, tools),
		tests: list(testsupport), reason: "developer commands may use test support and tools"},

	// The csi/ and kubelet/ modules: the root module's public packages;
	// their tests also test support and the base helpers (the crash
	// points, the options that install hooks there, mount IDs); the e2e
	// harness also the image writer; the deploy test's and the e2e
	// harness's tests also the agent (they check the shipped DaemonSet's
	// arguments with the agent's own parser, and run it).
	{pkgs: []string{"csi/..."}, may: list(public, []string{"csi/..."}),
		tests:  list(testsupport, base),
		reason: "another module: public API only, test support in tests"},
	{pkgs: []string{"kubelet/hack/..."}, may: list(public, tools, []string{"kubelet/..."}),
		tests:  list(testsupport, []string{"internal/agent"}),
		reason: "the e2e harness writes images with the tools; its tests run the real agent and check the manifests' arguments with the agent's parser"},
	{pkgs: []string{"kubelet/deploytest"}, may: list(public, []string{"kubelet/..."}),
		tests:  list(testsupport, []string{"internal/agent"}),
		reason: "checks the DaemonSet's serve arguments with the agent's parser"},
	{pkgs: []string{"kubelet/..."}, may: list(public, []string{"kubelet/..."}),
		tests:  list(testsupport, base),
		reason: "another module: public API only, test support in tests"},
}

// match reports whether path (below the module path) matches pattern.
func match(pattern, path string) bool {
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == p || strings.HasPrefix(path, p+"/")
	}
	return path == pattern
}

func matchAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, path) })
}

// ruleFor returns the first rule whose pkgs match pkg: more specific
// entries stand before the general ones (kubelet/hack/... before
// kubelet/...).
func ruleFor(pkg string) (rule, bool) {
	for _, r := range rules {
		if matchAny(r.pkgs, pkg) {
			return r, true
		}
	}
	return rule{}, false
}

// imports maps each package directory (below the module path) to the
// nodevol packages its non-test and test files import, for every GOOS:
// build constraints are not applied, so a Linux-only import counts on
// every system.
type pkgImports struct{ prod, test map[string][]string } // import -> files

func readImports(t *testing.T, root string) map[string]*pkgImports {
	t.Helper()
	pkgs := map[string]*pkgImports{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		p := pkgs[pkg]
		if p == nil {
			p = &pkgImports{prod: map[string][]string{}, test: map[string][]string{}}
			pkgs[pkg] = p
		}
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			rest, ok := strings.CutPrefix(ip, module+"/")
			if !ok || rest == pkg {
				continue
			}
			file := filepath.ToSlash(filepath.Join(rel, name))
			if strings.HasSuffix(name, "_test.go") {
				p.test[rest] = append(p.test[rest], file)
			} else {
				p.prod[rest] = append(p.prod[rest], file)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestImportsFollowTheLayout checks every import of a nodevol package in
// the root, csi/, kubelet/ and monitoring/ modules against the table.
func TestImportsFollowTheLayout(t *testing.T) {
	pkgs := readImports(t, "..")
	for _, must := range []string{"internal/cli", "mountdetect", "csi/driver", "kubelet/volumeplugin", "internal/base/fsat"} {
		if pkgs[must] == nil {
			t.Fatalf("package %s not found: the walk did not see the modules", must)
		}
	}
	names := make([]string, 0, len(pkgs))
	for pkg := range pkgs {
		names = append(names, pkg)
	}
	sort.Strings(names)
	for _, pkg := range names {
		p := pkgs[pkg]
		r, ok := ruleFor(pkg)
		if !ok {
			t.Errorf("package %s is in no group of the table in internal/deps_test.go: place it (see docs/layout.md)", pkg)
			continue
		}
		for imp, files := range p.prod {
			if !matchAny(r.may, imp) {
				t.Errorf("%s imports %s, which its group may not import (%s); files: %s", pkg, imp, r.reason, strings.Join(files, ", "))
			}
		}
		for imp, files := range p.test {
			if !matchAny(r.may, imp) && !matchAny(r.tests, imp) && !testMayImport(pkg, imp) {
				t.Errorf("tests of %s import %s, which they may not (%s); files: %s", pkg, imp, r.reason, strings.Join(files, ", "))
			}
		}
	}
}

// testMayImport is the rule every test file of the root module follows
// besides its group's: within the root module a test may import any
// package but the product's (the CLI and the agent are tested in their
// own packages).
func testMayImport(pkg, imp string) bool {
	inRoot := func(p string) bool {
		return !match("csi/...", p) && !match("kubelet/...", p) && !match("monitoring/...", p)
	}
	return inRoot(pkg) && inRoot(imp) && !match("internal/cli", imp) && !match("internal/agent", imp) && !match("cmd/...", imp)
}

// TestRulesRejectWrongImports checks the table itself: imports the
// layout forbids are refused.
func TestRulesRejectWrongImports(t *testing.T) {
	for _, c := range []struct {
		pkg, imp string
		test     bool
	}{
		{"internal/base/fsat", "mountdetect", false},
		{"internal/base/friend", "emptydir", false},
		{"csi/driver", "internal/base/friend", false},
		{"mountdetect", "emptydir", false},
		{"mountdetect", "internal/testsupport/mounttest", false},
		{"emptydir", "internal/cli", false},
		{"volume", "internal/tools/ociimage", false},
		{"csi/driver", "internal/base/fsat", false},
		{"csi/driver", "internal/cli", true},
		{"csi/driver", "internal/executor", true},
		{"kubelet/volumeplugin", "internal/executor", false},
		{"kubelet/volumeplugin", "internal/testsupport/mounttest", false},
		{"mountdetect", "internal/cli", true},
		{"cmd/nodevol", "mountdetect", false},
		{"cmd/nodevol", "internal/agent", false},
		{"internal/cli", "internal/agent", false},
		{"emptydir", "internal/agent", true},
	} {
		r, ok := ruleFor(c.pkg)
		if !ok {
			t.Fatalf("no rule for %s", c.pkg)
		}
		allowed := matchAny(r.may, c.imp)
		if c.test {
			allowed = allowed || matchAny(r.tests, c.imp) || testMayImport(c.pkg, c.imp)
		}
		if allowed {
			t.Errorf("%s (test files: %v) may import %s; the layout forbids it", c.pkg, c.test, c.imp)
		}
	}
}

// TestPublicAPINamesNoInternalType: no exported function, method, field
// or type of a public package takes, returns or embeds a type of an
// internal package. Such an identifier is API that only nodevol can use
// (a test hook whose parameter nobody else can build), and go doc shows it
// to everyone.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	// known names an internal type on purpose, with why.
	known := map[string]string{
		"mountdetect.Entry.MountStat": "the entry's statx answer (fsat.MountStat); its fields are the API",
	}
	for _, pkg := range public {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			continue // a package of another branch not merged here
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			internalName := map[string]bool{} // local names of internal imports
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if rest, ok := strings.CutPrefix(p, module+"/"); ok && match("internal/...", rest) {
					local := p[strings.LastIndex(p, "/")+1:]
					if imp.Name != nil {
						local = imp.Name.Name
					}
					internalName[local] = true
				}
			}
			check := func(where string, n ast.Node) {
				ast.Inspect(n, func(n ast.Node) bool {
					if _, ok := n.(*ast.FuncLit); ok {
						return false
					}
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if id, ok := sel.X.(*ast.Ident); ok && internalName[id.Name] {
						if _, ok := known[where]; !ok {
							t.Errorf("%s (%s) names the internal %s.%s in the public API", where, filepath.ToSlash(name), id.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					where := pkg + "." + d.Name.Name
					if d.Recv != nil {
						recv := d.Recv.List[0].Type
						if s, ok := recv.(*ast.StarExpr); ok {
							recv = s.X
						}
						id, ok := recv.(*ast.Ident)
						if !ok || !id.IsExported() {
							continue
						}
						where = pkg + "." + id.Name + "." + d.Name.Name
					}
					check(where, d.Type)
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							st, ok := s.Type.(*ast.StructType)
							if !ok {
								check(pkg+"."+s.Name.Name, s.Type)
								continue
							}
							for _, fld := range st.Fields.List {
								fname := ""
								if len(fld.Names) > 0 {
									if !fld.Names[0].IsExported() {
										continue
									}
									fname = fld.Names[0].Name
								} else {
									e := fld.Type
									if se, ok := e.(*ast.StarExpr); ok {
										e = se.X
									}
									if se, ok := e.(*ast.SelectorExpr); ok {
										fname = se.Sel.Name
									} else if id, ok := e.(*ast.Ident); ok {
										fname = id.Name
									}
								}
								check(pkg+"."+s.Name.Name+"."+fname, fld.Type)
							}
						case *ast.ValueSpec:
							if s.Type != nil && s.Names[0].IsExported() {
								check(pkg+"."+s.Names[0].Name, s.Type)
							}
						}
					}
				}
			}
		}
	}
}
