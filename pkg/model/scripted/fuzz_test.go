package scripted_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

func FuzzParse(f *testing.F) {
	for _, p := range []string{"demo.json", filepath.Join("testdata", "example.json")} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		`{"turns":[]}`,
		`{"turns":[{"content":"{{result \"a\"}}","calls":{"name":"x","count":3,"id_prefix":""}}]}`,
		`{"turns":[{"tool_calls":[{"id":"","name":"","arguments":"{not json"}]}]}`,
		`{"turns":[{"content":"{{\"{{\"}}"}]}`,
		`{"turns":[{"content":"{{range .}}{{end}}"}]}`,
		`{"turns":null}`,
		`{"turns":[{"calls":{"name":"x","count":-1}}]}`,
		`{"turns":[],"variants":[{"system_contains":"c","turns":[{"content":"v"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := scripted.Parse(data)
		if err != nil {
			return
		}
		if m.Turns() > scripted.MaxTurns {
			t.Fatalf("%d turns", m.Turns())
		}
		msgs := []loop.Message{{Role: "user", Content: "x"}}
		for range min(m.Turns(), 5) + 1 {
			resp, err := m.Complete(t.Context(), loop.Request{Messages: msgs})
			if err != nil {
				return
			}
			if resp.Message.Role != "assistant" || len(resp.Message.ToolCalls) > scripted.MaxCallsPerTurn {
				t.Fatalf("response %+v", resp.Message.Role)
			}
			if (len(resp.Message.ToolCalls) > 0) != (resp.FinishReason == "tool_calls") {
				t.Fatalf("finish reason %q with %d calls", resp.FinishReason, len(resp.Message.ToolCalls))
			}
			msgs = append(msgs, resp.Message)
			for _, tc := range resp.Message.ToolCalls {
				if tc.Type != "function" {
					t.Fatalf("type %q", tc.Type)
				}
				msgs = append(msgs, loop.Message{Role: "tool", ToolCallID: tc.ID, Content: tc.Function.Arguments})
			}
		}
		// Parsing is deterministic: the same bytes give the same first answer.
		m2, err := scripted.Parse(data)
		if err != nil {
			t.Fatalf("second parse failed: %v", err)
		}
		a, errA := m.Complete(t.Context(), loop.Request{})
		b, errB := m2.Complete(t.Context(), loop.Request{})
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if (errA == nil) != (errB == nil) || string(ja) != string(jb) {
			t.Fatalf("two parses answer differently: %s vs %s", ja, jb)
		}
	})
}
