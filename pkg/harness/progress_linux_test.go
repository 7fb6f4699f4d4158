package harness_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestExecProgressThroughTheLauncher: a tool with limits starts through
// the supervisor and the launcher, and its progress descriptor survives
// both.
func TestExecProgressThroughTheLauncher(t *testing.T) {
	_, tool := shTool(t, "limited", `echo "limited step" >&3; echo ok`, map[string]any{"limits": map[string]any{"cpu_seconds": 10}})
	h, err := harness.New(harness.Config{}, tool)
	if err != nil {
		t.Fatal(err)
	}
	var log progressLog
	res := h.Execute(harness.WithProgress(t.Context(), log.add), harness.Call{Tool: "limited", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	if res.Outcome != protocol.OutcomeOK || res.Output != "ok\n" {
		t.Fatalf("result %+v", res)
	}
	if got := log.got(); len(got) != 1 || got[0] != "limited step" {
		t.Errorf("progress %q", got)
	}
}
