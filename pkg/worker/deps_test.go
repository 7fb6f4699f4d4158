package worker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsStayLight: a program that imports this package gets neither the
// embedded server, the OpenTelemetry SDK or its OTLP exporter (a program
// installs its own provider), nor the model providers' SDKs.
func TestDepsStayLight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/nats-io/nats-server/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters",
			"github.com/openai/", "github.com/anthropics/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("pkg/worker depends on %s", dep)
			}
		}
	}
}
