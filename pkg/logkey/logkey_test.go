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

// durationAlias matches a package's log-key constant that names
// DurationMS.
var durationAlias = regexp.MustCompile(`\b(\w+)\s*=\s*logkey\.DurationMS\b`)

// durationUse matches a zerolog field written under a key, capturing the
// method and the key.
var durationUse = regexp.MustCompile(`\.(\w+)\((logkey\.DurationMS|\w+)\s*,`)

// TestDurationIsWholeMilliseconds reads every non-test Go file of the
// module and fails on a duration_ms written as anything but an integer
// (Int64 or Int of a duration's Milliseconds): zerolog's Dur writes a
// float, so the same key would hold 12 in one process and 12.345 in
// another.
func TestDurationIsWholeMilliseconds(t *testing.T) {
	files := goFiles(t)
	// The key's names: logkey.DurationMS and each package's alias of it,
	// by package directory.
	aliases := map[string]map[string]bool{}
	for path, data := range files {
		for _, m := range durationAlias.FindAllStringSubmatch(string(data), -1) {
			dir := filepath.Dir(path)
			if aliases[dir] == nil {
				aliases[dir] = map[string]bool{}
			}
			aliases[dir][m[1]] = true
		}
	}
	uses := 0
	for path, data := range files {
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range durationUse.FindAllStringSubmatch(line, -1) {
				if m[2] != "logkey.DurationMS" && !aliases[filepath.Dir(path)][m[2]] {
					continue
				}
				uses++
				if m[1] != "Int64" && m[1] != "Int" {
					t.Errorf("%s:%d writes %s with %s: log durations as Int64(%s, d.Milliseconds())", path, i+1, m[2], m[1], m[2])
				}
			}
		}
	}
	if uses < 5 {
		t.Fatalf("found %d uses of logkey.DurationMS: the scan missed them", uses)
	}
}

// goFiles returns the module's non-test Go files outside pkg/logkey, by
// path relative to the module root.
func goFiles(t *testing.T) map[string][]byte {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	self := filepath.Join(root, "pkg", "logkey")
	out := map[string][]byte{}
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
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("read %d Go files under %s: the walk missed the tree", len(out), root)
	}
	return out
}

// TestNoPackageSpellsASharedKey reads every non-test Go file of the module
// and fails on a shared log key spelled anywhere but in this package, so
// that "run" against "run_id" and "duration" against "duration_ms" cannot
// come back.
func TestNoPackageSpellsASharedKey(t *testing.T) {
	for path, data := range goFiles(t) {
		for i, line := range strings.Split(string(data), "\n") {
			for _, re := range stale {
				if m := re.FindString(line); m != "" {
					t.Errorf("%s:%d spells a shared log key: %s (use package logkey)", path, i+1, m)
				}
			}
		}
	}
}
