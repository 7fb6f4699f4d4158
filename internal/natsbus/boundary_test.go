package natsbus_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// jetstreamPath is the package only the NATS boundary imports.
const jetstreamPath = "github.com/nats-io/nats.go/jetstream"

// boundary are the packages of the module that may import jetstreamPath
// (a path and everything under it): natsbus itself, discovery, the
// embedded server, the test helpers and fleetbench's direct-JetStream
// baselines.
var boundary = []string{
	"internal/natsbus",
	"internal/discovery",
	"internal/embedded",
	"internal/natstest",
	"cmd/fleetbench",
}

// TestOnlyTheBoundaryImportsJetStream lists every package of the module
// with "go list -json" and fails when one outside the boundary imports
// nats.go/jetstream directly in its non-test files. Importing natsbus
// brings jetstream in as a transitive dependency, which is the point:
// only the packages' own Imports are checked.
func TestOnlyTheBoundaryImportsJetStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Skipf("go env GOMOD: %v", err)
	}
	root := strings.TrimSuffix(strings.TrimSpace(string(gomod)), "/go.mod")
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Module,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type pkg struct {
		ImportPath string
		Imports    []string
		Module     *struct{ Path string }
		Error      *struct{ Err string }
	}
	var (
		listed, inside int
		offenders      []string
	)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.Module == nil {
			t.Fatalf("go list %s: no module", p.ImportPath)
		}
		listed++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, p.Module.Path), "/")
		if !slices.Contains(p.Imports, jetstreamPath) {
			continue
		}
		if allowed(rel) {
			inside++
			continue
		}
		offenders = append(offenders, p.ImportPath)
	}
	if len(offenders) > 0 {
		t.Errorf("packages outside the NATS boundary import %s (move what they do into natsbus):\n  %s",
			jetstreamPath, strings.Join(offenders, "\n  "))
	}
	// The check would pass vacuously if go list listed nothing or the
	// boundary itself stopped importing JetStream.
	if listed < 10 || inside == 0 {
		t.Fatalf("go list listed %d packages, %d inside the boundary import jetstream; want a whole module", listed, inside)
	}
}

// allowed reports whether the package at rel (its path inside the module)
// is part of the boundary.
func allowed(rel string) bool {
	for _, b := range boundary {
		if rel == b || strings.HasPrefix(rel, b+"/") {
			return true
		}
	}
	return false
}
