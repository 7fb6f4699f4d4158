package anthropic

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/transcript"
)

func addFixtures(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
}

func FuzzToResponse(f *testing.F) {
	addFixtures(f, "message_parallel_tool_use.json", "message_end_turn.json", "message_max_tokens_tool_use.json", "message_refusal.json")
	f.Add(`{"content":[{"type":"tool_use","id":"a","name":"n","input":"str"},{"type":"tool_use","id":"a","input":null}],"stop_reason":"pause_turn"}`)
	f.Add(`{"content":null,"stop_reason":"weird"}`)
	f.Fuzz(func(t *testing.T, body string) {
		var msg sdk.Message
		if err := json.Unmarshal([]byte(body), &msg); err != nil {
			return
		}
		resp, err := toResponse(&msg)
		if err != nil {
			return
		}
		n := 0
		for _, b := range msg.Content {
			if b.Type == "tool_use" {
				n++
			}
		}
		if len(resp.Message.ToolCalls) != n || resp.Message.Role != "assistant" {
			t.Fatalf("%d calls from %d tool_use blocks", len(resp.Message.ToolCalls), n)
		}
		for _, tc := range resp.Message.ToolCalls {
			if tc.Function.Arguments == "" {
				t.Fatal("empty arguments")
			}
		}
	})
}

func FuzzDecodeTranscript(f *testing.F) {
	f.Add(`[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x","is_error":true}]}]`)
	f.Add(`{"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"t"}]}]}`)
	f.Fuzz(func(t *testing.T, data string) {
		msgs, err := transcript.DecodeAnthropic([]byte(data))
		if err != nil {
			return
		}
		// What decodes converts back without error.
		if _, _, err := ToMessages(msgs); err != nil {
			t.Fatalf("ToMessages: %v", err)
		}
		for _, m := range msgs {
			if m.Role == "tool" && m.Outcome == "" {
				t.Fatal("tool message without outcome")
			}
		}
		_ = loop.Message{}
	})
}
