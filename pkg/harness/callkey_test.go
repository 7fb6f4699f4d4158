package harness_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestCallKeyReachesTools: a Go tool reads the call's idempotency key from
// its context, an exec tool from $TOOLFLEET_CALL_KEY; a call without a key
// gives none.
func TestCallKeyReachesTools(t *testing.T) {
	tools, err := harness.ParseManifest([]byte(`{"tools":[
		{"name":"key_env","description":"prints its call key","command":["sh","-c","printf %s \"$TOOLFLEET_CALL_KEY\""],"timeout":"5s"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	tools = append(tools, harness.Tool{Name: "key_ctx", Description: "returns its call key",
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) { return harness.CallKeyFrom(ctx), nil }})
	h, err := harness.New(harness.Config{}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []protocol.ToolName{"key_env", "key_ctx"} {
		for _, key := range []string{"k3y-0f-the-call", ""} {
			res := h.Execute(t.Context(), harness.Call{Tool: tool, Arguments: json.RawMessage(`{}`), CallKey: protocol.CallKey(key)})
			if res.Outcome != protocol.OutcomeOK || res.Output != key {
				t.Errorf("%s with key %q: %+v", tool, key, res)
			}
		}
	}
}
