package openai

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"
)

func FuzzRetryAfter(f *testing.F) {
	for _, s := range [][2]string{
		{"", "0"}, {"", "1.5"}, {"", "Wed, 21 Oct 2015 07:28:00 GMT"}, {"", "-3"}, {"", "NaN"},
		{"", "1e400"}, {"250", ""}, {"-1", "2"}, {"1e13", ""}, {"abc", "xyz"}, {"", "Inf"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ms, s string) {
		h := http.Header{}
		if ms != "" {
			h.Set("Retry-After-Ms", ms)
		}
		if s != "" {
			h.Set("Retry-After", s)
		}
		d, ok := retryAfter(h)
		if d < 0 {
			t.Fatalf("retryAfter(%q, %q) = %v, negative", ms, s, d)
		}
		if !ok && d != 0 {
			t.Fatalf("retryAfter(%q, %q) = %v without a header", ms, s, d)
		}
		if ms == "" && s == "" && ok {
			t.Fatalf("no headers but ok")
		}
	})
}

func FuzzToResponse(f *testing.F) {
	f.Add(`{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	f.Add(`{"choices":[{"message":{"tool_calls":[{"id":"a","type":"function","function":{"name":"n","arguments":"{x"}},{"id":"b","function":{"arguments":{"k":1}}},{"id":"c","type":"custom","custom":{"name":"z","input":"q"}}]}}]}`)
	f.Add(`{"choices":[]}`)
	f.Add(`{"choices":null}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, body string) {
		var cc sdk.ChatCompletion
		if err := json.Unmarshal([]byte(body), &cc); err != nil {
			return
		}
		resp, err := toResponse(&cc)
		if err != nil {
			if len(cc.Choices) != 0 {
				t.Fatalf("error %v with %d choices", err, len(cc.Choices))
			}
			return
		}
		calls := cc.Choices[0].Message.ToolCalls
		if len(resp.Message.ToolCalls) != len(calls) {
			t.Fatalf("%d tool calls mapped from %d", len(resp.Message.ToolCalls), len(calls))
		}
		for i, tc := range resp.Message.ToolCalls {
			if tc.ID != calls[i].ID || tc.Type != "function" {
				t.Fatalf("call %d: %+v from %+v", i, tc, calls[i])
			}
		}
		if resp.Message.Role != "assistant" {
			t.Fatalf("role %q", resp.Message.Role)
		}
	})
}

func TestBackoffBounds(t *testing.T) {
	base, maxDelay := 10*time.Millisecond, 100*time.Millisecond
	for attempt := 1; attempt <= 40; attempt++ {
		want := base << min(attempt-1, 20)
		want = min(want, maxDelay)
		for range 50 {
			d := backoff(base, maxDelay, attempt)
			if d < want/2 || d > want {
				t.Fatalf("backoff(attempt %d)=%v, want within [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}
