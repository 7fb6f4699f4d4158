package examples_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestOutsideModule vets and runs the tests of examples/agenttest, a module
// of its own that imports toolfleet through a replace directive, as a user's
// module would: only public packages are in its reach (the go command
// refuses an internal import across modules).
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs another module's tests")
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = "agenttest"
		// -mod=mod: a requirement the main module gained since go.sum was
		// written is added, not refused; the module cache serves it.
		cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in examples/agenttest: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("go %s: %s", strings.Join(args, " "), bytes.TrimSpace(out))
	}
}

// TestOutsideModuleIsShort: the acceptance bar — serving a typed tool on a
// fleet, running a scripted model that calls it and reading the
// observation take under 40 lines.
func TestOutsideModuleIsShort(t *testing.T) {
	b, err := os.ReadFile("agenttest/agent_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n >= 40 {
		t.Fatalf("agenttest/agent_test.go has %d lines, want < 40", n)
	}
	for _, imp := range []string{"/internal/"} {
		if bytes.Contains(b, []byte(imp)) {
			t.Fatalf("agenttest imports %s", imp)
		}
	}
}
