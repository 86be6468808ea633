package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// No exported identifier of a public package mentions a type of an internal package:
// a user could not name it, and a change inside internal/ would change the public API.
// Checked over every exported declaration: functions and methods (of exported
// types), types (aliases, exported struct fields, interface methods), variables and
// constants.
func TestNoInternalTypeInExportedAPI(t *testing.T) {
	files := publicFiles(t)
	if len(files) < 50 {
		t.Fatalf("listed %d files: the listing is wrong", len(files))
	}
	for _, f := range files {
		for _, leak := range internalMentions(t, f.path) {
			t.Errorf("%s: %s", f.pkg, leak)
		}
	}
}

// internalMentions returns the exported declarations of the file that mention an
// imported internal package.
func internalMentions(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	internal := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if !strings.Contains(p+"/", "/internal/") {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		internal[name] = true
	}
	if len(internal) == 0 {
		return nil
	}
	var leaks []string
	report := func(what string, n ast.Node) {
		if n == nil || !mentions(n, internal) {
			return
		}
		leaks = append(leaks, fset.Position(n.Pos()).String()+": exported "+what+" mentions an internal package")
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Recv != nil && !exportedReceiver(d.Recv) {
				continue
			}
			report(d.Name.Name, d.Type)
			if d.Recv != nil {
				report(d.Name.Name+"'s receiver", d.Recv)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						reportType(s.Name.Name, s, report)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							report(n.Name, s.Type)
							for _, v := range s.Values {
								report(n.Name, v)
							}
						}
					}
				}
			}
		}
	}
	return leaks
}

// reportType reports an alias or a defined type whose exported parts mention an
// internal package: a struct's exported (or embedded) fields, an interface's methods.
func reportType(name string, s *ast.TypeSpec, report func(string, ast.Node)) {
	switch ty := s.Type.(type) {
	case *ast.StructType:
		for _, f := range ty.Fields.List {
			if len(f.Names) == 0 || f.Names[0].IsExported() {
				report(name+" field", f.Type)
			}
		}
	case *ast.InterfaceType:
		for _, m := range ty.Methods.List {
			report(name+" method", m.Type)
		}
	default:
		report(name, s.Type)
	}
	if s.TypeParams != nil {
		report(name+"'s type parameters", s.TypeParams)
	}
}

func exportedReceiver(recv *ast.FieldList) bool {
	for _, f := range recv.List {
		ty := f.Type
		for {
			switch x := ty.(type) {
			case *ast.StarExpr:
				ty = x.X
				continue
			case *ast.IndexExpr:
				ty = x.X
				continue
			case *ast.IndexListExpr:
				ty = x.X
				continue
			case *ast.Ident:
				return x.IsExported()
			}
			return false
		}
	}
	return false
}

// mentions reports whether n refers to pkg.Name for one of the packages.
func mentions(n ast.Node, pkgs map[string]bool) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && pkgs[id.Name] {
				found = true
			}
		}
		return !found && !isFuncBody(n)
	})
	return found
}

func isFuncBody(n ast.Node) bool {
	_, ok := n.(*ast.BlockStmt)
	return ok
}
