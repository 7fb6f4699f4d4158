package loop_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestTraceRedaction checks that trace lines carry argument keys but never
// argument values (unless TraceArgs), and never tool output, validation
// messages, operator reasons or model content.
func TestTraceRedaction(t *testing.T) {
	const (
		argCanary     = "CANARY-arg-7f3a"
		outCanary     = "CANARY-out-91bc"
		invalidCanary = "CANARY-invalid-55d0"
		reasonCanary  = "CANARY-reason-0e2f"
		contentCanary = "CANARY-content-c4d1"
	)
	for _, traceArgs := range []bool{false, true} {
		name := "keys only"
		if traceArgs {
			name = "trace args"
		}
		t.Run(name, func(t *testing.T) {
			denied := looptest.MustSpec("guarded", openSchema)
			denied.RequiresApproval = true
			m := looptest.NewModel(
				looptest.Turn{Content: contentCanary, Calls: []loop.ToolCall{
					looptest.Call("c1", "echo", `{"text":"`+argCanary+`"}`),
					looptest.Call("c2", "code", `{"code":"`+invalidCanary+`"}`),
					looptest.Call("c3", "guarded", `{}`),
				}},
				looptest.Answer(contentCanary),
			)
			cfg := fastConfig()
			cfg.TraceArgs = traceArgs
			e := newEnv(t, cfg, m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
				return looptest.OK(outCanary), true
			}, looptest.DenyAll(reasonCanary))
			e.cat.Specs = append(e.cat.Specs, denied,
				looptest.MustSpec("code", `{"type":"object","properties":{"code":{"type":"string","pattern":"^[0-9]+$"}}}`))
			res, err := e.run(t, "go")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			// The canaries did reach the model, so their absence from the
			// logs means something.
			obs := toolMessages(res)
			if obs["c1"] != outCanary || !strings.Contains(obs["c2"], invalidCanary) || !strings.Contains(obs["c3"], reasonCanary) {
				t.Fatalf("observations %v do not carry the canaries", obs)
			}
			logs := e.logs.String()
			for _, c := range []string{outCanary, reasonCanary, contentCanary} {
				if strings.Contains(logs, c) {
					t.Fatalf("logs contain %s", c)
				}
			}
			// Argument values, and so the validation message that quotes
			// one, appear only when the operator opted in.
			for _, c := range []string{argCanary, invalidCanary} {
				if got := strings.Contains(logs, c); got != traceArgs {
					t.Fatalf("%s in logs=%v, want %v", c, got, traceArgs)
				}
			}
			starts := e.logs.lines(t, "tool_call_start")
			if len(starts) != 3 {
				t.Fatalf("%d tool_call_start lines, want 3", len(starts))
			}
			first := starts[0]
			if keys, _ := first["arg_keys"].([]any); len(keys) != 1 || keys[0] != "text" {
				t.Fatalf("arg_keys=%v, want [text]", first["arg_keys"])
			}
			if first["args_digest"] != protocol.ArgsDigest([]byte(`{"text":"`+argCanary+`"}`)) || first["call_id"] != "c1" || first["tool"] != "echo" {
				t.Fatalf("tool_call_start=%v, want ids, tool and digest", first)
			}
			ends := e.logs.lines(t, "tool_call_end")
			if len(ends) != 3 || ends[0]["outcome"] != "ok" || ends[0]["worker"] != "looptest" || ends[2]["outcome"] != "denied" {
				t.Fatalf("tool_call_end lines=%v", ends)
			}
			if model := e.logs.lines(t, "model_call_end"); len(model) != 2 || model[0]["finish_reason"] != "tool_calls" {
				t.Fatalf("model_call_end lines=%v", model)
			}
		})
	}
}
