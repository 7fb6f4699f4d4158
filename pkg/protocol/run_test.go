package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeRunRequestAccepts(t *testing.T) {
	tests := []struct {
		name string
		data string
		want RunRequest
	}{
		{"prompt only, no v", `{"prompt": "hi"}`, RunRequest{Prompt: "hi"}},
		{"v 1", `{"v": 1, "prompt": "hi"}`, RunRequest{V: 1, Prompt: "hi"}},
		{"huge limits are accepted (clamped later)", `{"prompt": "hi", "max_rounds": 1000000, "tool_timeout_ms": 99999999999}`,
			RunRequest{Prompt: "hi", MaxRounds: 1000000, ToolTimeoutMS: 99999999999}},
		{"zero limits mean the operator's", `{"prompt": "hi", "max_rounds": 0, "max_tool_calls_per_round": 0}`, RunRequest{Prompt: "hi"}},
		{"require approval", `{"prompt": "hi", "require_approval": ["echo", "*"]}`, RunRequest{Prompt: "hi", RequireApproval: []string{"echo", "*"}}},
		{"messages instead of a prompt", `{"messages": [{"role": "user", "content": "hi"}]}`, RunRequest{}},
		{"null messages with a prompt", `{"prompt": "hi", "messages": null}`, RunRequest{Prompt: "hi"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeRunRequest([]byte(tt.data), 0)
			if err != nil {
				t.Fatalf("DecodeRunRequest: %v", err)
			}
			if got.Prompt != tt.want.Prompt || got.V != tt.want.V || got.MaxRounds != tt.want.MaxRounds ||
				got.ToolTimeoutMS != tt.want.ToolTimeoutMS || strings.Join(got.RequireApproval, ",") != strings.Join(tt.want.RequireApproval, ",") {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeRunRequestRejects(t *testing.T) {
	tests := []struct {
		name  string
		data  string
		limit int
		want  error
		field string
	}{
		{"too large", `{"prompt": "` + strings.Repeat("x", 100) + `"}`, 64, ErrTooLarge, ""},
		{"over the default limit", `{"prompt": "` + strings.Repeat("x", DefaultMaxRunRequestBytes) + `"}`, 0, ErrTooLarge, ""},
		{"not json", `prompt: hi`, 0, ErrMalformed, ""},
		{"array", `["hi"]`, 0, ErrMalformed, ""},
		{"unknown field", `{"prompt": "hi", "max_round": 3}`, 0, ErrMalformed, ""},
		{"trailing data", `{"prompt": "hi"} {}`, 0, ErrMalformed, ""},
		{"string limit", `{"prompt": "hi", "max_rounds": "3"}`, 0, ErrMalformed, ""},
		{"float limit", `{"prompt": "hi", "max_rounds": 2.5}`, 0, ErrMalformed, ""},
		{"limit beyond int64", `{"prompt": "hi", "max_rounds": 1e100}`, 0, ErrMalformed, ""},
		{"version 2", `{"v": 2, "prompt": "hi"}`, 0, ErrVersion, "v"},
		{"no prompt", `{}`, 0, ErrMissingField, "prompt"},
		{"blank prompt", `{"prompt": " \n\t"}`, 0, ErrMissingField, "prompt"},
		{"prompt and messages", `{"prompt": "hi", "messages": []}`, 0, ErrInvalidField, "messages"},
		{"messages not an array", `{"messages": {"role": "user"}}`, 0, ErrInvalidField, "messages"},
		{"negative rounds", `{"prompt": "hi", "max_rounds": -1}`, 0, ErrInvalidField, "max_rounds"},
		{"negative calls", `{"prompt": "hi", "max_tool_calls_per_round": -5}`, 0, ErrInvalidField, "max_tool_calls_per_round"},
		{"negative chars", `{"prompt": "hi", "max_observation_chars": -5}`, 0, ErrInvalidField, "max_observation_chars"},
		{"negative timeout", `{"prompt": "hi", "tool_timeout_ms": -1}`, 0, ErrInvalidField, "tool_timeout_ms"},
		{"bad approval name", `{"prompt": "hi", "require_approval": ["fleet.>"]}`, 0, ErrInvalidField, "require_approval"},
		{"too many approval names", `{"prompt": "hi", "require_approval": [` + strings.Repeat(`"a",`, MaxRequireApproval) + `"a"]}`, 0, ErrInvalidField, "require_approval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRunRequest([]byte(tt.data), tt.limit)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Field != tt.field {
				t.Fatalf("err = %#v, want field %q", err, tt.field)
			}
		})
	}
}

func TestRunRequestErrorsDoNotQuoteValues(t *testing.T) {
	const canary = "SECRET-CANARY-91b2"
	for _, in := range []string{
		`{"prompt": 7, "x": "` + canary + `"}`,
		`{"prompt": "hi", "require_approval": ["` + canary + `.x"]}`,
		`{"prompt": "hi", "max_rounds": "` + canary + `"}`,
		`{"v": "` + canary + `"}`,
	} {
		_, err := DecodeRunRequest([]byte(in), 0)
		if err == nil {
			t.Fatalf("DecodeRunRequest(%s) succeeded", in)
		}
		if strings.Contains(err.Error(), canary) {
			t.Errorf("error quotes a value: %v", err)
		}
		if re := RunErrorFrom(err); strings.Contains(re.Message, canary) {
			t.Errorf("wire error quotes a value: %+v", re)
		}
	}
}

func TestRunErrorFrom(t *testing.T) {
	_, err := DecodeRunRequest([]byte(`{"prompt": "hi", "max_rounds": -1}`), 0)
	got := RunErrorFrom(err)
	if got.Code != CodeInvalidField || got.Field != "max_rounds" || got.Message == "" {
		t.Fatalf("RunErrorFrom(decode error) = %+v", got)
	}
	got = RunErrorFrom(errors.New("dial tcp 10.0.0.1: password=hunter2"))
	if got.Code != CodeInternal || strings.Contains(got.Message, "hunter2") {
		t.Fatalf("RunErrorFrom(other) = %+v, want a generic internal error", got)
	}
}

func TestRunResponseAndResultRoundTrip(t *testing.T) {
	resp := RunResponse{V: 1, Status: RunAccepted, RunID: "r1", ResultSubject: "fleet.run.result.r1", ResultBucket: "fleet_runs"}
	data, _ := Encode(&resp)
	if got, err := DecodeRunResponse(data, 0); err != nil || got.RunID != "r1" || got.Status != RunAccepted {
		t.Fatalf("DecodeRunResponse = %+v, %v", got, err)
	}
	refused := RunResponse{V: 1, Status: RunRefused, Error: &RunError{Code: CodeMalformed, Message: "invalid JSON at byte 3"}}
	data, _ = Encode(&refused)
	if got, err := DecodeRunResponse(data, 0); err != nil || got.Error.Code != CodeMalformed {
		t.Fatalf("DecodeRunResponse(refused) = %+v, %v", got, err)
	}
	for name, bad := range map[string]RunResponse{
		"accepted without id":   {V: 1, Status: RunAccepted},
		"refused without error": {V: 1, Status: RunRefused},
		"no status":             {V: 1, RunID: "r1"},
		"odd status":            {V: 1, Status: "maybe", RunID: "r1"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, bad)
		}
	}

	res := RunResult{
		V: 1, RunID: "r1", Answer: "42", TerminationReason: "natural",
		Metadata: json.RawMessage(`{"rounds":1}`), Calls: json.RawMessage(`[]`), Messages: json.RawMessage(`[]`),
		Coordinator: "c1", Attempt: 1, Limits: &RunLimits{MaxRounds: 3, MaxToolCallsPerRound: 32, MaxObservationChars: 100},
		Clamped: []string{"max_rounds"}, StartedAt: time.Unix(1700000000, 0).UTC(),
	}
	data, _ = Encode(&res)
	if strings.Contains(string(data), "submitted_at") || strings.Contains(string(data), `"error"`) {
		t.Fatalf("zero fields were encoded: %s", data)
	}
	got, err := DecodeRunResult(data, 0)
	if err != nil || got.Limits.MaxRounds != 3 || got.Clamped[0] != "max_rounds" || !got.StartedAt.Equal(res.StartedAt) {
		t.Fatalf("DecodeRunResult = %+v, %v", got, err)
	}
	for name, bad := range map[string]RunResult{
		"no reason nor error": {V: 1, RunID: "r1"},
		"bad run id":          {V: 1, RunID: "a.b", TerminationReason: "natural"},
		"error without code":  {V: 1, RunID: "r1", Error: &RunError{Message: "x"}},
		"no version":          {RunID: "r1", TerminationReason: "natural"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, bad)
		}
	}
}

func TestRunSubjects(t *testing.T) {
	var s Subjects
	if got, _ := s.RunSubmission("alice", "default", "s1"); got != "fleet.run.submit.alice.default.s1" {
		t.Fatalf("RunSubmission = %q", got)
	}
	if got, _ := s.RunResult("r1"); got != "fleet.run.result.r1" {
		t.Fatalf("RunResult = %q", got)
	}
	if s.RunsStream() != "FLEET_RUNS" || s.RunsBucket() != "fleet_runs" || s.RunSubmissions() != "fleet.run.submit.*.*.*" || s.RunResults() != "fleet.run.result.>" {
		t.Fatalf("names = %q %q %q %q", s.RunsStream(), s.RunsBucket(), s.RunSubmissions(), s.RunResults())
	}
	if got := s.RunsMaxDeliveries(); got != "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.FLEET_RUNS.coordinators" {
		t.Fatalf("RunsMaxDeliveries = %q", got)
	}
	for _, bad := range []string{"", "a.b", "*", ">"} {
		if _, err := s.RunResult(RunID(bad)); !errors.Is(err, ErrInvalidField) {
			t.Errorf("RunResult(%q) err = %v, want invalid", bad, err)
		}
	}
	acme, _ := NewSubjects("acme-x")
	if acme.RunsStream() != "ACME_X_RUNS" || acme.RunsBucket() != "acme_x_runs" || acme.RunSubmissions() != "acme-x.run.submit.*.*.*" {
		t.Fatalf("acme names = %q %q %q", acme.RunsStream(), acme.RunsBucket(), acme.RunSubmissions())
	}
}
