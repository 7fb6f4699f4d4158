package protocol

import (
	"strings"
	"testing"
)

// FuzzDecodeRun feeds the same bytes to the run decoders: none may panic or
// return an error of another type, an accepted message must pass Validate
// and survive an encode/decode round trip, and an accepted request never
// has negative limits nor both a prompt and messages.
func FuzzDecodeRun(f *testing.F) {
	for _, s := range []string{
		`{"prompt": "hi"}`,
		`{"v": 1, "prompt": "hi", "max_rounds": 1000000, "max_tool_calls_per_round": 2, "max_observation_chars": 10, "tool_timeout_ms": 5}`,
		`{"messages": [{"role": "user", "content": "hi"}], "require_approval": ["*", "echo"]}`,
		`{"prompt": "hi", "messages": null}`,
		`{"prompt": "hi", "max_rounds": -1}`,
		`{"v":1,"status":"accepted","run_id":"r1","result_subject":"fleet.run.result.r1","result_bucket":"fleet_runs"}`,
		`{"v":1,"status":"refused","error":{"code":"malformed","message":"x"}}`,
		`{"v":1,"run_id":"r1","answer":"a","termination_reason":"natural","metadata":{},"calls":[],"messages":[],"limits":{"max_rounds":1,"max_tool_calls_per_round":1,"max_observation_chars":1},"clamped":["max_rounds"]}`,
		`{"v":1,"run_id":"r1","answer":"","error":{"code":"internal","message":"m"}}`,
		`{"v":2}`, `[]`, `null`, "\x00{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(name string, m message, err error) bool {
			if err != nil {
				if _, ok := err.(*Error); !ok {
					t.Fatalf("%s: error of type %T, want *protocol.Error", name, err)
				}
				return false
			}
			if err := m.Validate(); err != nil {
				t.Fatalf("%s: accepted message fails Validate: %v", name, err)
			}
			return true
		}
		req, err := DecodeRunRequest(data, 8192)
		if check("run request", &req, err) {
			if req.MaxRounds < 0 || req.MaxToolCallsPerRound < 0 || req.MaxObservationChars < 0 || req.ToolTimeoutMS < 0 {
				t.Fatalf("accepted negative limits: %+v", req)
			}
			if (strings.TrimSpace(req.Prompt) != "") == req.HasMessages() {
				t.Fatalf("accepted a request with prompt %q and messages %q", req.Prompt, req.Messages)
			}
			enc, err := Encode(&req)
			if err != nil {
				t.Fatalf("accepted request does not encode: %v", err)
			}
			if _, err := DecodeRunRequest(enc, 1<<20); err != nil {
				t.Fatalf("re-encoded request refused: %v\n%s", err, enc)
			}
		}
		resp, err := DecodeRunResponse(data, 8192)
		if check("run response", &resp, err) {
			enc, _ := Encode(&resp)
			if _, err := DecodeRunResponse(enc, 1<<20); err != nil {
				t.Fatalf("re-encoded response refused: %v\n%s", err, enc)
			}
		}
		res, err := DecodeRunResult(data, 8192)
		if check("run result", &res, err) {
			enc, _ := Encode(&res)
			if _, err := DecodeRunResult(enc, 1<<20); err != nil {
				t.Fatalf("re-encoded result refused: %v\n%s", err, enc)
			}
		}
	})
}
