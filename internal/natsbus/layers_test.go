package natsbus_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// transportLayers lists, for each package of the transport (its path under
// internal/natsbus, "" for natsbus itself), the transport packages its
// non-test files may import. A package imports only those below it:
// natsbus ← admission, stores, workqueue ← dispatch, workerbus; the
// coordinator's and the worker's transports never import each other.
// bustest, the test fleet, may import them all.
var transportLayers = map[string][]string{
	"":          {"streammsg"},
	"streammsg": {},
	"admission": {"", "streammsg"},
	"stores":    {"", "streammsg"},
	"workqueue": {"", "streammsg"},
	"dispatch":  {"", "streammsg", "admission", "stores", "workqueue"},
	"workerbus": {"", "streammsg", "admission", "stores", "workqueue"},
	"bustest":   {"", "streammsg", "admission", "stores", "workqueue", "dispatch", "workerbus"},
}

// maxInternalLines is the most non-test lines one package under internal/
// holds: enough for one job, small enough to read in a sitting.
const maxInternalLines = 3000

// TestTransportLayers fails when a package of the transport imports one
// beside or above it, or when a package the table does not know appears
// (a new package must say where it stands).
func TestTransportLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the transport")
	}
	const base = "github.com/toolfleet/toolfleet/internal/natsbus"
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Error", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seen := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, base), "/")
		may, known := transportLayers[rel]
		if !known {
			t.Errorf("%s is not in transportLayers: say which transport packages it may import", p.ImportPath)
			continue
		}
		seen++
		for _, imp := range p.Imports {
			if imp != base && !strings.HasPrefix(imp, base+"/") {
				continue
			}
			to := strings.TrimPrefix(strings.TrimPrefix(imp, base), "/")
			if !slices.Contains(may, to) {
				t.Errorf("%s imports %s, beside or above it (allowed: %q)", p.ImportPath, imp, may)
			}
		}
	}
	if seen != len(transportLayers) {
		t.Errorf("go list found %d of the %d transport packages", seen, len(transportLayers))
	}
}

// TestInternalPackagesStayReadable fails when a package under internal/
// holds more than maxInternalLines lines in its non-test Go files.
func TestInternalPackagesStayReadable(t *testing.T) {
	files, err := filepath.Glob("../*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../*/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for _, f := range slices.Concat(files, more) {
		if strings.HasSuffix(f, "_test.go") || strings.Contains(f, "/testdata/") {
			continue
		}
		n, err := countLines(f)
		if err != nil {
			t.Fatal(err)
		}
		dir, _ := filepath.Abs(filepath.Dir(f))
		lines[dir] += n
	}
	if len(lines) < 10 {
		t.Fatalf("counted %d packages under internal/; want them all", len(lines))
	}
	for dir, n := range lines {
		if n > maxInternalLines {
			t.Errorf("%s holds %d lines of non-test Go, over %d: split it by audience", dir, n, maxInternalLines)
		}
	}
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}
