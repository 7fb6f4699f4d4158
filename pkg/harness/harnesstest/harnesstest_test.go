package harnesstest_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestTools(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rec, recorder := harnesstest.Record("rec", "recorded")
	h := harnesstest.New(t, harness.Config{},
		harnesstest.Static("static", "out"),
		harnesstest.Fail("fail", errors.New("boom")),
		harnesstest.Panic("panic", 42),
		harnesstest.Sleep("sleep"),
		harnesstest.Block("block", release),
		rec,
	)
	const short = 200 * time.Millisecond
	tests := []struct {
		tool, args  string
		timeout     time.Duration // 0: the tool's own
		wantOutcome protocol.Outcome
		wantOutput  string
		wantType    string
	}{
		{"static", `{}`, 0, protocol.OutcomeOK, "out", ""},
		{"fail", `{}`, 0, protocol.OutcomeFailed, "", "*errors.errorString"},
		{"panic", `{}`, 0, protocol.OutcomeFailed, "", "panic: int"},
		{"sleep", `{"ms":1}`, 0, protocol.OutcomeOK, "slept", ""},
		{"sleep", `{"ms":60000}`, short, protocol.OutcomeTimeout, "", ""},
		{"block", `{}`, short, protocol.OutcomeTimeout, "", ""},
		{"rec", `{"a":1}`, 0, protocol.OutcomeOK, "recorded", ""},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			var deadline time.Time
			if tt.timeout > 0 {
				deadline = time.Now().Add(tt.timeout)
			}
			r := h.Execute(t.Context(), harness.Call{Tool: protocol.ToolName(tt.tool), Arguments: json.RawMessage(tt.args), Deadline: deadline})
			if r.Outcome != tt.wantOutcome || r.Output != tt.wantOutput || r.ErrorType != tt.wantType {
				t.Fatalf("result = %+v, want %s %q %q", r, tt.wantOutcome, tt.wantOutput, tt.wantType)
			}
		})
	}
	if recorder.Count() != 1 || string(recorder.Args()[0]) != `{"a":1}` {
		t.Fatalf("recorder: %d calls, %s", recorder.Count(), recorder.Args())
	}
	if h.Abandoned() != 1 {
		t.Fatalf("Abandoned() = %d, want 1 (the block tool)", h.Abandoned())
	}
}
