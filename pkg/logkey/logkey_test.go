package logkey_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stale matches a log key that pkg/logkey owns spelled out again: as a
// package's log-key constant, or as a literal key of a zerolog field. "run"
// and "duration" are the old spellings of run_id and duration_ms.
var stale = []*regexp.Regexp{
	regexp.MustCompile(`\blog\w*\s*=\s*"(run|run_id|duration|duration_ms|call_key|call_id|tool|outcome|attempt|worker|error_type|round)"`),
	regexp.MustCompile(`\.(Str|Strs|Int|Int64|Uint64|Dur|Float64|Interface|Any)\("(run|run_id|duration|duration_ms|call_key|call_id|tool|outcome|attempt|worker|error_type|round)"`),
}

// TestNoPackageSpellsASharedKey reads every non-test Go file of the module
// and fails on a shared log key spelled anywhere but in this package, so
// that "run" against "run_id" and "duration" against "duration_ms" cannot
// come back.
func TestNoPackageSpellsASharedKey(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	self := filepath.Join(root, "pkg", "logkey")
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "vendor" || name == "testdata") || path == self {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, re := range stale {
				if m := re.FindString(line); m != "" {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d spells a shared log key: %s (use package logkey)", rel, i+1, m)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files under %s: the walk missed the tree", files, root)
	}
}
