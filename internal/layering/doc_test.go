package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"strings"
	"testing"
)

// Every exported identifier of a public package has a doc comment, so go doc tells
// a user what it is: functions, methods of exported types, types, constants and
// variables, the exported fields of exported structs and the methods of exported
// interfaces. A doc comment on a const or var block documents its members; a field,
// an interface method or a const/var member may instead carry a trailing line
// comment; an embedded field documents itself.
func TestExportedIdentifiersAreDocumented(t *testing.T) {
	files := publicFiles(t)
	if len(files) < 50 {
		t.Fatalf("listed %d files: the listing is wrong", len(files))
	}
	for _, f := range files {
		for _, miss := range undocumented(t, f.path) {
			t.Errorf("%s: %s has no doc comment", f.pkg, miss)
		}
	}
}

// publicFile is one non-test Go file of a public package: pkg is the package's
// path inside the module.
type publicFile struct{ pkg, path string }

// publicFiles lists the non-test Go files of the module's public packages: those
// outside internal/ and cmd/.
func publicFiles(t *testing.T) []publicFile {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .CgoFiles}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var files []publicFile
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, dir := fields[0], fields[1]
		if strings.Contains(pkg+"/", "/internal/") || strings.HasPrefix(pkg, module+"/cmd/") {
			continue
		}
		for _, name := range fields[2:] {
			files = append(files, publicFile{strings.TrimPrefix(pkg, module+"/"), dir + "/" + name})
		}
	}
	return files
}

// undocumented returns file:line and name of each exported declaration of the file
// that has no doc comment.
func undocumented(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	check := func(what string, n ast.Node, docs ...*ast.CommentGroup) {
		for _, d := range docs {
			if d != nil && strings.TrimSpace(d.Text()) != "" {
				return
			}
		}
		missing = append(missing, fset.Position(n.Pos()).String()+": "+what)
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				check("func "+d.Name.Name, d, d.Doc)
			} else if exportedReceiver(d.Recv) {
				check("method "+receiverName(d.Recv)+"."+d.Name.Name, d, d.Doc)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if len(d.Specs) == 1 {
						check("type "+s.Name.Name, s, s.Doc, d.Doc)
					} else {
						check("type "+s.Name.Name, s, s.Doc)
					}
					checkMembers(s.Name.Name, s.Type, check)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							check(d.Tok.String()+" "+n.Name, n, d.Doc, s.Doc, s.Comment)
						}
					}
				}
			}
		}
	}
	return missing
}

// checkMembers checks the exported fields of a struct type (and of the struct types
// written inline in them) and the methods of an interface type.
func checkMembers(owner string, ty ast.Expr, check func(string, ast.Node, ...*ast.CommentGroup)) {
	switch ty := ty.(type) {
	case *ast.StructType:
		for _, f := range ty.Fields.List {
			if len(f.Names) == 0 {
				continue // embedded: documented by its type
			}
			var exported []string
			for _, n := range f.Names {
				if n.IsExported() {
					exported = append(exported, n.Name)
				}
			}
			if len(exported) == 0 {
				continue
			}
			name := owner + "." + strings.Join(exported, ", ")
			check("field "+name, f, f.Doc, f.Comment)
			checkMembers(name, f.Type, check)
		}
	case *ast.InterfaceType:
		for _, m := range ty.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					check("method "+owner+"."+n.Name, m, m.Doc, m.Comment)
				}
			}
		}
	}
}

// receiverName returns the name of the receiver's type, without pointer or type
// parameters.
func receiverName(recv *ast.FieldList) string {
	ty := recv.List[0].Type
	for {
		switch x := ty.(type) {
		case *ast.StarExpr:
			ty = x.X
		case *ast.IndexExpr:
			ty = x.X
		case *ast.IndexListExpr:
			ty = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}
