package serve

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestApplyLimits(t *testing.T) {
	operator := loop.Config{MaxRounds: 5, MaxToolCallsPerRound: 10, MaxObservationChars: 1000, RequireApproval: []string{"deploy"}}
	withOverride := operator
	withOverride.ToolTimeout = 10 * time.Second
	tests := []struct {
		name        string
		ceil        loop.Config
		req         protocol.RunRequest
		wantRounds  int
		wantCalls   int
		wantChars   int
		wantLoopTT  time.Duration // loop.Config.ToolTimeout
		wantCap     time.Duration // catalog cap
		wantTTms    int64         // recorded tool_timeout_ms
		wantClamped []string
		wantApprove []string
	}{
		{"absent limits keep the ceilings", operator, protocol.RunRequest{Prompt: "p"},
			5, 10, 1000, 0, 0, 0, nil, []string{"deploy"}},
		{"lower limits apply", operator, protocol.RunRequest{Prompt: "p", MaxRounds: 2, MaxToolCallsPerRound: 3, MaxObservationChars: 50},
			2, 3, 50, 0, 0, 0, nil, []string{"deploy"}},
		{"equal limits are not clamped", operator, protocol.RunRequest{Prompt: "p", MaxRounds: 5},
			5, 10, 1000, 0, 0, 0, nil, []string{"deploy"}},
		{"a million rounds is clamped to the ceiling", operator, protocol.RunRequest{Prompt: "p", MaxRounds: 1000000},
			5, 10, 1000, 0, 0, 0, []string{"max_rounds"}, []string{"deploy"}},
		{"every raise is clamped", operator, protocol.RunRequest{Prompt: "p", MaxRounds: 6, MaxToolCallsPerRound: 11, MaxObservationChars: 1 << 30},
			5, 10, 1000, 0, 0, 0, []string{"max_rounds", "max_tool_calls_per_round", "max_observation_chars"}, []string{"deploy"}},
		{"zero ceilings mean the loop defaults", loop.Config{}, protocol.RunRequest{Prompt: "p", MaxRounds: 100},
			loop.DefaultMaxRounds, loop.DefaultMaxToolCallsPerRound, loop.DefaultMaxObservationChars, 0, 0, 0, []string{"max_rounds"}, nil},
		{"tool timeout lowers the operator's override", withOverride, protocol.RunRequest{Prompt: "p", ToolTimeoutMS: 2000},
			5, 10, 1000, 2 * time.Second, 0, 2000, nil, []string{"deploy"}},
		{"tool timeout above the override is clamped", withOverride, protocol.RunRequest{Prompt: "p", ToolTimeoutMS: 60000},
			5, 10, 1000, 10 * time.Second, 0, 10000, []string{"tool_timeout_ms"}, []string{"deploy"}},
		{"without an override the tool timeout caps each tool's own", operator, protocol.RunRequest{Prompt: "p", ToolTimeoutMS: 2000},
			5, 10, 1000, 0, 2 * time.Second, 2000, nil, []string{"deploy"}},
		{"an absurd tool timeout saturates", operator, protocol.RunRequest{Prompt: "p", ToolTimeoutMS: 1 << 62},
			5, 10, 1000, 0, time.Duration(1<<63 - 1).Truncate(time.Millisecond), int64(time.Duration(1<<63-1) / time.Millisecond), nil, []string{"deploy"}},
		{"approvals are added, never removed", operator, protocol.RunRequest{Prompt: "p", RequireApproval: []string{"echo", "deploy"}},
			5, 10, 1000, 0, 0, 0, nil, []string{"deploy", "echo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := applyLimits(tt.ceil, tt.req)
			lc := got.loop
			if lc.MaxRounds != tt.wantRounds || lc.MaxToolCallsPerRound != tt.wantCalls || lc.MaxObservationChars != tt.wantChars {
				t.Fatalf("loop limits = %d/%d/%d, want %d/%d/%d", lc.MaxRounds, lc.MaxToolCallsPerRound, lc.MaxObservationChars,
					tt.wantRounds, tt.wantCalls, tt.wantChars)
			}
			if lc.ToolTimeout != tt.wantLoopTT || got.toolCap != tt.wantCap {
				t.Fatalf("ToolTimeout=%v cap=%v, want %v and %v", lc.ToolTimeout, got.toolCap, tt.wantLoopTT, tt.wantCap)
			}
			rec := got.record
			if rec.MaxRounds != lc.MaxRounds || rec.MaxToolCallsPerRound != lc.MaxToolCallsPerRound ||
				rec.MaxObservationChars != lc.MaxObservationChars || rec.ToolTimeoutMS != tt.wantTTms {
				t.Fatalf("record = %+v, want the applied limits and tool_timeout_ms %d", rec, tt.wantTTms)
			}
			if !slices.Equal(got.clamped, tt.wantClamped) {
				t.Fatalf("clamped = %v, want %v", got.clamped, tt.wantClamped)
			}
			if !slices.Equal(lc.RequireApproval, tt.wantApprove) || !slices.Equal(rec.RequireApproval, tt.wantApprove) {
				t.Fatalf("require approval = %v (recorded %v), want %v", lc.RequireApproval, rec.RequireApproval, tt.wantApprove)
			}
			if err := lc.Validate(); err != nil {
				t.Fatalf("applied configuration is invalid: %v", err)
			}
		})
	}
	// The ceiling's slice is never shared with a run's.
	got := applyLimits(operator, protocol.RunRequest{Prompt: "p", RequireApproval: []string{"x"}})
	got.loop.RequireApproval[0] = "changed"
	if operator.RequireApproval[0] != "deploy" {
		t.Fatal("applyLimits aliased the operator's RequireApproval")
	}
}

type staticCatalog []protocol.ToolSpec

func (c staticCatalog) Tools(context.Context) ([]protocol.ToolSpec, error) { return c, nil }

func TestCappedCatalogNeverRaisesATimeout(t *testing.T) {
	inner := staticCatalog{
		{Name: "quick", TimeoutMS: 500},
		{Name: "slow", TimeoutMS: 60000},
		{Name: "default"}, // 30s
	}
	specs, err := cappedCatalog{inner: inner, max: 2 * time.Second}.Tools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[protocol.ToolName]int64{"quick": 500, "slow": 2000, "default": 2000}
	for _, s := range specs {
		if s.TimeoutMS != want[s.Name] {
			t.Errorf("%s timeout = %dms, want %dms", s.Name, s.TimeoutMS, want[s.Name])
		}
	}
	if inner[1].TimeoutMS != 60000 {
		t.Fatal("the capped catalog changed the underlying specs")
	}
}

func TestDecodeRunRequestMessages(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		wantErr bool
		wantN   int
	}{
		{"prompt", `{"prompt": "hi"}`, false, 0},
		{"transcript", `{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}`, false, 2},
		{"empty transcript", `{"messages": []}`, true, 0},
		{"unknown message field", `{"messages": [{"role": "user", "content": "hi", "name": "x"}]}`, true, 0},
		{"message not an object", `{"messages": ["hi"]}`, true, 0},
		{"too many messages", `{"messages": [` + repeatJoin(`{"role":"user","content":"x"}`, MaxRunMessages+1) + `]}`, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, msgs, err := decodeRunRequest([]byte(tt.data), 1<<20)
			if tt.wantErr {
				var pe *protocol.Error
				if !errors.As(err, &pe) || pe.Field != "messages" {
					t.Fatalf("err = %v, want an invalid messages field", err)
				}
				return
			}
			if err != nil || len(msgs) != tt.wantN {
				t.Fatalf("got %d messages, %v; want %d", len(msgs), err, tt.wantN)
			}
		})
	}
}

func repeatJoin(s string, n int) string {
	out := make([]byte, 0, (len(s)+1)*n)
	for i := range n {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, s...)
	}
	return string(out)
}

func TestEncodeBounded(t *testing.T) {
	big := make([]byte, 0, 5000)
	big = append(big, '[')
	for i := range 200 {
		if i > 0 {
			big = append(big, ',')
		}
		big = append(big, `{"role":"user","content":"xxxxxxxxxxxxxxxxxxxx"}`...)
	}
	big = append(big, ']')
	rec := func() *protocol.RunResult {
		return &protocol.RunResult{V: 1, RunID: "r1", Answer: "a", TerminationReason: "natural",
			Metadata: []byte(`{"rounds":1}`), Calls: []byte(`[]`), Messages: big}
	}
	r := rec()
	data, err := encodeBounded(r, 1<<20)
	if err != nil || r.TranscriptOmitted || len(data) < len(big) {
		t.Fatalf("under the limit: omitted=%v len=%d err=%v", r.TranscriptOmitted, len(data), err)
	}
	r = rec()
	data, err = encodeBounded(r, 2048)
	if err != nil || !r.TranscriptOmitted || r.Messages != nil || len(data) > 2048 || r.Answer != "a" {
		t.Fatalf("over the limit: omitted=%v len=%d answer=%q err=%v", r.TranscriptOmitted, len(data), r.Answer, err)
	}
	if _, err := protocol.DecodeRunResult(data, 0); err != nil {
		t.Fatalf("bounded result does not decode: %v", err)
	}
	r = rec()
	r.Answer = string(make([]byte, 4096))
	data, err = encodeBounded(r, 2048)
	if err != nil || len(data) > 2048 || r.Error == nil || r.Error.Code != protocol.CodeTooLarge || r.Answer != "" {
		t.Fatalf("huge answer: len=%d rec=%+v err=%v", len(data), r, err)
	}
}
