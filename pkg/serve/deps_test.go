package serve_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsStayLight: a program that imports this package, or pkg/client
// to submit to it, gets neither the embedded server, the OpenTelemetry SDK
// or its exporters (a program installs its own provider), nor the model
// providers' SDKs (a program chooses its providers: pkg/model/providers).
// pkg/worker and pkg/runner keep the same rule in their own tests.
func TestDepsStayLight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{".", "../client"} {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, banned := range []string{"github.com/nats-io/nats-server/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters",
					"github.com/openai/", "github.com/anthropics/"} {
					if strings.HasPrefix(dep, banned) {
						t.Errorf("%s depends on %s", pkg, dep)
					}
				}
			}
		})
	}
}
