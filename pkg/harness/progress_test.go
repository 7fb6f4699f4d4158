package harness_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

type progressLog struct {
	mu   sync.Mutex
	msgs []string
	n    atomic.Int64
}

func (p *progressLog) add(msg string) {
	if p.n.Add(1) > 100 {
		return // a sink drops what it cannot pass on
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msg)
}

func (p *progressLog) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.msgs...)
}

func TestGoToolReportsProgress(t *testing.T) {
	tool := harness.Tool{
		Name: "steps", Description: "reports progress", Parameters: json.RawMessage(`{"type":"object"}`),
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			harness.ReportProgress(ctx, "step 1 of 2")
			harness.ReportProgress(ctx, "  "+strings.Repeat("é", harness.MaxProgressBytes)+"  ")
			harness.ReportProgress(ctx, "")
			return "done", nil
		},
	}
	h, err := harness.New(harness.Config{}, tool)
	if err != nil {
		t.Fatal(err)
	}
	var log progressLog
	res := h.Execute(harness.WithProgress(t.Context(), log.add), harness.Call{Tool: "steps", Arguments: json.RawMessage(`{}`)})
	if res.Outcome != protocol.OutcomeOK || res.Output != "done" {
		t.Fatalf("result %+v", res)
	}
	got := log.got()
	if len(got) != 2 || got[0] != "step 1 of 2" || len(got[1]) > harness.MaxProgressBytes || !strings.HasPrefix(got[1], "éé") {
		t.Errorf("progress %q", got)
	}
	// Without a sink, reporting does nothing.
	if res := h.Execute(t.Context(), harness.Call{Tool: "steps", Arguments: json.RawMessage(`{}`)}); res.Output != "done" {
		t.Errorf("result %+v", res)
	}
}

func TestExecToolReportsProgress(t *testing.T) {
	tool := execTool(t, "steps", `
cat >/dev/null
[ "$TOOLFLEET_PROGRESS_FD" = 3 ] || { echo "no progress fd"; exit 0; }
echo "starting" >&3
printf 'no newline at the end' >&3
echo "result"
`, nil)
	h, err := harness.New(harness.Config{}, tool)
	if err != nil {
		t.Fatal(err)
	}
	var log progressLog
	res := h.Execute(harness.WithProgress(t.Context(), log.add), harness.Call{Tool: "steps", Arguments: json.RawMessage(`{}`)})
	if res.Outcome != protocol.OutcomeOK || res.Output != "result\n" {
		t.Fatalf("result %+v", res)
	}
	if got := log.got(); len(got) != 2 || got[0] != "starting" || got[1] != "no newline at the end" {
		t.Errorf("progress %q", got)
	}
	// Without a sink the tool has no progress descriptor.
	res = h.Execute(t.Context(), harness.Call{Tool: "steps", Arguments: json.RawMessage(`{}`)})
	if res.Output != "no progress fd\n" {
		t.Errorf("without a sink: %+v", res)
	}
}

// TestExecProgressFlood: a tool that writes 100,000 progress lines as fast
// as it can, and an over-long line, finishes with its result unchanged; the
// reader keeps up whatever the sink drops.
func TestExecProgressFlood(t *testing.T) {
	tool := execTool(t, "flood", `
cat >/dev/null
awk 'BEGIN { for (i = 0; i < 100000; i++) print "step " i; s = sprintf("%100000s", "x"); print s }' >&3
echo "result"
`, nil)
	h, err := harness.New(harness.Config{}, tool)
	if err != nil {
		t.Fatal(err)
	}
	var log progressLog
	res := h.Execute(harness.WithProgress(t.Context(), log.add), harness.Call{Tool: "flood", Arguments: json.RawMessage(`{}`)})
	if res.Outcome != protocol.OutcomeOK || res.Output != "result\n" {
		t.Fatalf("result %+v", res)
	}
	if n := log.n.Load(); n < 100000 {
		t.Errorf("%d reports read, want all 100001", n)
	}
	for _, m := range log.got() {
		if len(m) > harness.MaxProgressBytes {
			t.Errorf("a report of %d bytes", len(m))
		}
	}
}
