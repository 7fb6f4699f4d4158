package mcptool_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsStayLight shows that an MCP client user gets neither nats.go nor
// the OpenTelemetry SDK or its OTLP exporter through this package.
func TestDepsStayLight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/nats-io/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "github.com/toolfleet/toolfleet/internal/tracing"} {
			if strings.HasPrefix(dep, banned) && dep != "github.com/toolfleet/toolfleet/internal/tracing/tracemeta" {
				t.Errorf("pkg/mcptool depends on %s", dep)
			}
		}
	}
}
