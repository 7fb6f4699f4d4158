package examples_test

import (
	"os/exec"
	"strings"
	"testing"
)

// heavy are the dependencies a program chooses for itself, never brought
// in by the door: the embedded server, the OpenTelemetry SDK and its
// exporters (a program installs its own tracer provider), and the model
// providers' SDKs (a program chooses its providers: pkg/model/providers).
var heavy = []string{
	"github.com/nats-io/nats-server/",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"github.com/openai/",
	"github.com/anthropics/",
}

// TestDoorStaysLight: a program that serves tools (pkg/worker), runs a
// loop (pkg/runner), serves submitted runs (pkg/serve) or submits them
// (pkg/client) links none of the heavy dependencies — and neither does
// fleetservice, a program built on all four with a scripted model of its
// own. The check itself finds them where they are (pkg/model/providers
// links both SDKs), so it cannot pass by reading nothing.
func TestDoorStaysLight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{"pkg/worker", "pkg/runner", "pkg/serve", "pkg/client", "examples/fleetservice"} {
		t.Run(pkg, func(t *testing.T) {
			deps := listDeps(t, pkg)
			if !deps["github.com/nats-io/nats.go"] {
				t.Fatalf("go list -deps %s does not list nats.go: %v", pkg, deps)
			}
			for _, dep := range heavyIn(deps) {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		})
	}
	t.Run("the check finds them", func(t *testing.T) {
		got := strings.Join(heavyIn(listDeps(t, "pkg/model/providers")), " ")
		if !strings.Contains(got, "github.com/openai/") || !strings.Contains(got, "github.com/anthropics/") {
			t.Fatalf("pkg/model/providers: found %q, want both providers' SDKs", got)
		}
	})
}

// listDeps returns the packages pkg (a directory of the module) depends
// on, itself included.
func listDeps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "./"+pkg)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		deps[d] = true
	}
	return deps
}

// heavyIn returns the heavy dependencies among deps.
func heavyIn(deps map[string]bool) []string {
	var found []string
	for d := range deps {
		for _, h := range heavy {
			if strings.HasPrefix(d, h) {
				found = append(found, d)
			}
		}
	}
	return found
}
