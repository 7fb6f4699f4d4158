package examples_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modulePath is the module whose internal packages a user cannot import.
const modulePath = "github.com/toolfleet/toolfleet"

// TestPublicSurfaceNamesNoInternalType parses every non-test file of the
// public packages (pkg/...) and fails on an exported declaration that shows
// a user a type of an internal package, whose fields go doc does not show
// and whose package a user cannot import: an exported alias of it
// (type X = internalpkg.Y), an exported type defined from or holding it in
// an exported field, an exported function's or method's parameter or
// result, an exported variable or constant declared with it.
func TestPublicSurfaceNamesNoInternalType(t *testing.T) {
	var offenders []string
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir("../pkg", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		offenders = append(offenders, internalInSurface(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("parsed %d files under pkg/, want the public packages", files)
	}
	for _, o := range offenders {
		t.Errorf("%s", o)
	}
}

// TestSurfaceCheckFindsInternalTypes: the check above finds each shape of
// an internal type in the surface, and passes what shows none.
func TestSurfaceCheckFindsInternalTypes(t *testing.T) {
	const header = "package p\nimport (\n\"github.com/toolfleet/toolfleet/internal/runs\"\nap \"github.com/toolfleet/toolfleet/internal/approval\"\n\"github.com/toolfleet/toolfleet/pkg/protocol\"\n)\n"
	for name, tc := range map[string]struct {
		src  string
		want int
	}{
		"alias":              {"type State = runs.State", 1},
		"named import alias": {"type Req = ap.PendingRequest", 1},
		"defined type":       {"type State runs.State", 1},
		"exported field":     {"type S struct { St runs.State }", 1},
		"embedded field":     {"type S struct { ap.PendingRequest }", 1},
		"slice in a result":  {"func F() ([]runs.State, error) { return nil, nil }", 1},
		"method parameter":   {"type C struct{}\nfunc (C) F(m map[string]*runs.State) {}", 1},
		"variable":           {"var V runs.State", 1},
		"interface method":   {"type I interface { F() runs.State }", 1},
		"unexported field":   {"type S struct { st runs.State }", 0},
		"unexported func":    {"func f() runs.State { return runs.State{} }", 0},
		"unexported method":  {"type C struct{}\nfunc (C) f() runs.State { return runs.State{} }", 0},
		"unexported type":    {"type c struct{}\nfunc (c) F() runs.State { return runs.State{} }", 0},
		"sentinel value":     {"var ErrX = runs.ErrNoJournal", 0},
		"public type":        {"type S struct { ID protocol.RunID }\nfunc F(s S) protocol.RunID { return s.ID }", 0},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name+".go", header+tc.src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := internalInSurface(fset, f); len(got) != tc.want {
			t.Errorf("%s: found %q, want %d", name, got, tc.want)
		}
	}
}

// internalInSurface returns a line for each exported declaration of f
// that names a type of one of the module's internal packages.
func internalInSurface(fset *token.FileSet, f *ast.File) []string {
	internal := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.HasPrefix(path, modulePath+"/internal/") {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		internal[name] = path
	}
	if len(internal) == 0 {
		return nil
	}
	var out []string
	report := func(what string, pos token.Pos, expr ast.Expr) {
		for _, sel := range internalTypes(expr, internal) {
			out = append(out, fset.Position(pos).String()+": "+what+" names "+sel)
		}
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || (d.Recv != nil && !exportedReceiver(d.Recv)) {
				continue
			}
			report("func "+d.Name.Name, d.Pos(), d.Type)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					kind := "type "
					if s.Assign.IsValid() {
						kind = "alias "
					}
					report(kind+s.Name.Name, s.Pos(), exportedPart(s.Type))
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Type != nil {
							report("var or const "+n.Name, s.Pos(), s.Type)
						}
					}
				}
			}
		}
	}
	return out
}

// exportedReceiver reports whether a method's receiver is an exported
// type (the method is then in go doc).
func exportedReceiver(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// exportedPart returns t without the unexported fields of a struct type
// (what go doc shows of it).
func exportedPart(t ast.Expr) ast.Expr {
	st, ok := t.(*ast.StructType)
	if !ok || st.Fields == nil {
		return t
	}
	kept := &ast.FieldList{}
	for _, field := range st.Fields.List {
		if len(field.Names) == 0 {
			if exportedEmbedded(field.Type) {
				kept.List = append(kept.List, field)
			}
			continue
		}
		for _, n := range field.Names {
			if n.IsExported() {
				kept.List = append(kept.List, field)
				break
			}
		}
	}
	return &ast.StructType{Fields: kept}
}

// exportedEmbedded reports whether an embedded field's name (its type's
// name) is exported.
func exportedEmbedded(t ast.Expr) bool {
	switch x := t.(type) {
	case *ast.StarExpr:
		return exportedEmbedded(x.X)
	case *ast.SelectorExpr:
		return x.Sel.IsExported()
	case *ast.Ident:
		return x.IsExported()
	}
	return false
}

// internalTypes returns the qualified names in expr (pkg.Name) whose
// package is one of internal's.
func internalTypes(expr ast.Expr, internal map[string]string) []string {
	var found []string
	ast.Inspect(expr, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok {
			if path, ok := internal[id.Name]; ok {
				found = append(found, path+"."+sel.Sel.Name)
			}
		}
		return false
	})
	return found
}
