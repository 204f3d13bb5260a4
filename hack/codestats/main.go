// Command codestats prints, per package of this module, what a
// maintainer's review of the structure looks at: lines of non-test Go,
// exported identifiers — "exported": top-level functions, types,
// variables and constants; "api": those plus the exported methods of
// exported types, the exported fields of exported structs and the
// methods of exported interfaces, everything go doc lists — and the
// functions whose cyclomatic complexity is highest (1 + one per if, for,
// range, case, select case, && and ||).
//
//	go run ./hack/codestats [-top N] [DIR]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type pkgStats struct {
	lines, exported, api int
}

type fnStats struct {
	name       string
	complexity int
}

func main() {
	top := flag.Int("top", 10, "how many of the most complex functions to list")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	pkgs := map[string]*pkgStats{}
	var fns []fnStats
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "vendor" || n == "testdata" || n == "hack") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		ps := pkgs[dir]
		if ps == nil {
			ps = &pkgStats{}
			pkgs[dir] = ps
		}
		ps.lines += strings.Count(string(src), "\n")
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					ps.exported++
					ps.api++
				}
				if d.Recv != nil && d.Name.IsExported() && ast.IsExported(funcName(d)[:strings.Index(funcName(d)+".", ".")]) {
					ps.api++
				}
				if d.Body != nil {
					fns = append(fns, fnStats{dir + "." + funcName(d), complexity(d.Body)})
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							ps.exported++
							ps.api += 1 + members(s.Type)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								ps.exported++
								ps.api++
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	w := len("package")
	for _, d := range dirs {
		w = max(w, len(d))
	}
	fmt.Printf("%-*s %7s %9s %5s\n", w, "package", "lines", "exported", "api")
	var lines, exported, api int
	for _, d := range dirs {
		fmt.Printf("%-*s %7d %9d %5d\n", w, d, pkgs[d].lines, pkgs[d].exported, pkgs[d].api)
		lines += pkgs[d].lines
		exported += pkgs[d].exported
		api += pkgs[d].api
	}
	fmt.Printf("%-*s %7d %9d %5d\n\n", w, "total", lines, exported, api)
	sort.Slice(fns, func(i, j int) bool { return fns[i].complexity > fns[j].complexity })
	fmt.Println("most complex functions (cyclomatic):")
	for i := 0; i < *top && i < len(fns); i++ {
		fmt.Printf("  %3d  %s\n", fns[i].complexity, fns[i].name)
	}
}

// members counts the exported fields of a struct type and the exported
// methods of an interface type (an embedded exported type counts once).
func members(t ast.Expr) int {
	var fields *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return 0
	}
	n := 0
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			e := f.Type
			if s, ok := e.(*ast.StarExpr); ok {
				e = s.X
			}
			if sel, ok := e.(*ast.SelectorExpr); ok {
				e = sel.Sel
			}
			if id, ok := e.(*ast.Ident); ok && id.IsExported() {
				n++
			}
			continue
		}
		for _, name := range f.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}

// complexity is 1 plus one per branch point in body (function literals
// included, as they are part of the function a reader reads).
func complexity(body *ast.BlockStmt) int {
	c := 1
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil { // not default
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}
