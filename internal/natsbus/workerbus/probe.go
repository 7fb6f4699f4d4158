package workerbus

import (
	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// ProbeConfig checks what w needs to serve: the calls and results streams
// and the consumer of each of its tools.
func (w *Worker) ProbeConfig() natsbus.ProbeConfig {
	cfg := natsbus.ProbeConfig{Streams: []string{w.subjects.CallsStream(), w.subjects.ResultsStream()}}
	if w.cfg.Guard != nil {
		cfg.Guards = []*natsbus.StreamGuard{w.cfg.Guard}
	}
	for _, tc := range w.tools {
		cfg.Consumers = append(cfg.Consumers, natsbus.ConsumerRef{Stream: w.subjects.CallsStream(), Name: tc.config.Durable})
	}
	return cfg
}
