package bustest

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/toolfleet/toolfleet/pkg/harness"
)

// EmptyObject is the schema of a tool that takes no arguments.
var EmptyObject = json.RawMessage(`{"type":"object","additionalProperties":false}`)

// Counting returns an idempotent tool that counts its runs and waits d
// (honouring its context) before answering "done".
func Counting(name string, runs *atomic.Int64, d time.Duration, idempotent bool) harness.Tool {
	return harness.Tool{
		Name: name, Parameters: EmptyObject, Idempotent: idempotent,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			runs.Add(1)
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return "done", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
	}
}
