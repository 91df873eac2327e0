package docs_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reasonPackages are the API packages whose …Reason constants are condition (and Event)
// reasons; every one must have a row in docs/troubleshooting.md.
var reasonPackages = []string{"api/v1alpha1", "api/infrastructure/v1alpha1"}

// troubleshootingDoc is the page whose tables list the reasons.
const troubleshootingDoc = "docs/troubleshooting.md"

// repoRoot is the repository's root, seen from this package's folder.
const repoRoot = "../.."

// TestTroubleshootingListsEveryReason fails when a …Reason constant of the API has no
// row in docs/troubleshooting.md, when a row names a constant that no longer exists, or
// when a row's reason is not the constant's value.
func TestTroubleshootingListsEveryReason(t *testing.T) {
	want := map[string]string{}
	for _, dir := range reasonPackages {
		for name, value := range reasonConstants(t, filepath.Join(repoRoot, dir)) {
			want[name] = value
		}
	}
	if len(want) == 0 {
		t.Fatalf("found no …Reason constants in %v", reasonPackages)
	}
	got := documentedReasons(t, filepath.Join(repoRoot, troubleshootingDoc))

	for _, name := range sortedKeys(want) {
		if _, ok := got[name]; !ok {
			t.Errorf("%s (reason %q) has no row in %s", name, want[name], troubleshootingDoc)
		}
	}
	for _, name := range sortedKeys(got) {
		if _, ok := want[name]; !ok {
			t.Errorf("%s names %s, which is no …Reason constant in %v", troubleshootingDoc, name, reasonPackages)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reasons in %s differ from the API's constants (-want +got):\n%s", troubleshootingDoc, diff)
	}
}

// reasonConstants returns the string constants named …Reason declared in the Go files of
// dir (tests and generated files aside), by name.
func reasonConstants(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") || strings.HasPrefix(filepath.Base(path), "zz_generated") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("failed to parse %s: %v", path, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasSuffix(id.Name, "Reason") || len(vs.Values) <= i {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: %s is not a string literal; the test cannot read its value", fset.Position(id.Pos()), id.Name)
						continue
					}
					value, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatalf("%s: %v", fset.Position(lit.Pos()), err)
					}
					out[id.Name] = value
				}
			}
		}
	}
	return out
}

// constantCell matches a table cell that names a …Reason constant.
var constantCell = regexp.MustCompile("^`([A-Za-z0-9_]+Reason)`$")

// documentedReasons reads the Markdown tables of path whose header has the columns
// "reason" and "constant", and returns each row's constant with its reason.
func documentedReasons(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]string{}
	reasonCol, constCol := -1, -1
	inTable := false
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "|") {
			inTable, reasonCol, constCol = false, -1, -1
			continue
		}
		cells := splitRow(text)
		if !inTable {
			inTable = true
			for i, c := range cells {
				switch strings.ToLower(c) {
				case "reason":
					reasonCol = i
				case "constant":
					constCol = i
				}
			}
			continue
		}
		if reasonCol < 0 || constCol < 0 || isSeparator(cells) {
			continue
		}
		if max(reasonCol, constCol) >= len(cells) {
			t.Errorf("%s:%d: the row has %d cells, fewer than the header", path, line, len(cells))
			continue
		}
		m := constantCell.FindStringSubmatch(cells[constCol])
		if m == nil {
			t.Errorf("%s:%d: the constant cell %q is not a `…Reason` identifier", path, line, cells[constCol])
			continue
		}
		if prev, dup := out[m[1]]; dup {
			t.Errorf("%s:%d: %s has a second row (first with reason %q)", path, line, m[1], prev)
		}
		out[m[1]] = strings.Trim(cells[reasonCol], "`")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// splitRow splits a Markdown table row into its trimmed cells. Escaped pipes (\|) stay
// in their cell.
func splitRow(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cell.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// isSeparator reports whether cells are a table's header separator (---, :--:).
func isSeparator(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
