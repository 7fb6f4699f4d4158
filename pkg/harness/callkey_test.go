package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

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

// TestWithCallKeyKeepsTheContext: a context carrying a call key is still
// its parent's: its deadline, its values, its end and the cause of it
// reach the tool and the contexts the tool derives from it.
func TestWithCallKeyKeepsTheContext(t *testing.T) {
	type otherKey struct{}
	cause := errors.New("the call's deadline")
	deadline := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadlineCause(context.WithValue(t.Context(), otherKey{}, "v"), deadline, cause)
	defer cancel()
	ctx := harness.WithCallKey(parent, "k1")
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	if got := harness.CallKeyFrom(child); got != "k1" {
		t.Errorf("CallKeyFrom = %q, want k1", got)
	}
	if got, _ := child.Value(otherKey{}).(string); got != "v" {
		t.Errorf("the parent's value = %q, want v", got)
	}
	if got, ok := child.Deadline(); !ok || !got.Equal(deadline) {
		t.Errorf("Deadline = %v, %v; want %v", got, ok, deadline)
	}
	if child.Err() != nil {
		t.Fatalf("Err = %v before the end", child.Err())
	}
	cancel()
	<-child.Done()
	if !errors.Is(child.Err(), context.Canceled) || !errors.Is(context.Cause(child), context.Canceled) {
		t.Errorf("after the parent's cancel: Err %v, Cause %v", child.Err(), context.Cause(child))
	}
	if got := harness.CallKeyFrom(context.Background()); got != "" {
		t.Errorf("CallKeyFrom a context without one = %q", got)
	}
}
