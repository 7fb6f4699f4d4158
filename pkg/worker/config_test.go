package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/tool"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// TestBadConfigIsAConfigError: every bad input is a config.Error naming
// its field, returned before any I/O (the connection here was never
// connected: using it would fail differently).
func TestBadConfigIsAConfigError(t *testing.T) {
	echo := tool.Must(tool.New(tool.Config{Name: "echo"}, func(_ context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	}))
	tools := []harness.Tool{echo}
	unconnected := new(nats.Conn)
	for _, tc := range []struct {
		name, field string
		nc          *nats.Conn
		cfg         worker.Config
	}{
		{"nil connection", "Conn", nil, worker.Config{Tools: tools}},
		{"no tools", "Tools", unconnected, worker.Config{}},
		{"duplicate tool", "Tools[1].Name", unconnected, worker.Config{Tools: []harness.Tool{echo, echo}}},
		{"name not a subject token", "Tools[0].Name", unconnected, worker.Config{Tools: []harness.Tool{{Name: "a.>", Run: echo.Run}}}},
		{"tool without a body", "Tools[0].Run", unconnected, worker.Config{Tools: []harness.Tool{{Name: "x"}}}},
		{"bad prefix", "Prefix", unconnected, worker.Config{Tools: tools, Prefix: "a b"}},
		{"negative concurrency", "Concurrency", unconnected, worker.Config{Tools: tools, Concurrency: -1}},
		{"huge concurrency", "Concurrency", unconnected, worker.Config{Tools: tools, Concurrency: 1 << 20}},
		{"negative ack wait", "AckWait", unconnected, worker.Config{Tools: tools, AckWait: -1}},
		{"negative grace", "ShutdownGrace", unconnected, worker.Config{Tools: tools, ShutdownGrace: -1}},
		{"negative output bound", "MaxOutputChars", unconnected, worker.Config{Tools: tools, MaxOutputChars: -1}},
		{"negative check interval", "StreamCheckInterval", unconnected, worker.Config{Tools: tools, StreamCheckInterval: -1}},
		{"bad worker name", "Name", unconnected, worker.Config{Tools: tools, Name: "has space"}},
		{"bad version", "Version", unconnected, worker.Config{Tools: tools, Version: "latest"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := worker.New(tc.nc, tc.cfg)
			var ce config.Error
			if !errors.As(err, &ce) || ce.ConfigField() != tc.field {
				t.Fatalf("err = %v, want a config.Error of %s", err, tc.field)
			}
		})
	}
}

// TestDefaultsAreTheFleets: the defaults this package documents are those
// the fleet's internals apply.
func TestDefaultsAreTheFleets(t *testing.T) {
	if worker.DefaultConcurrency != workerbus.DefaultConcurrency || worker.DefaultAckWait != workerbus.DefaultAckWait ||
		worker.DefaultStreamCheckInterval != natsbus.DefaultStreamCheckInterval || worker.DefaultVersion != workerbus.DefaultServiceVersion {
		t.Fatal("pkg/worker's defaults differ from internal/natsbus's")
	}
}
