package responses_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
	"github.com/toolfleet/toolfleet/pkg/model/responses"
	"github.com/toolfleet/toolfleet/pkg/model/responses/responsestest"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newModel(t *testing.T, srv *responsestest.Server, cfg responses.Config) *responses.Model {
	t.Helper()
	cfg.Model, cfg.BaseURL = "gpt-test", srv.URL
	if cfg.APIKey == "" {
		cfg.APIKey = "k"
	}
	cfg.RetryBaseDelay, cfg.MaxRetryDelay = time.Millisecond, time.Second
	m, err := responses.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var weather = loop.ToolDef{Name: "get_weather", Description: "weather",
	Parameters: json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}`)}

var hi = []loop.Message{{Role: "user", Content: "hi"}}

func TestRecordedResponses(t *testing.T) {
	t.Run("function calls", func(t *testing.T) {
		srv := responsestest.NewServer(t, responsestest.Sequence(responsestest.Reply{Body: fixture(t, "response_function_calls.json")}))
		r, err := newModel(t, srv, responses.Config{}).Complete(t.Context(), loop.Request{Messages: hi, Tools: []loop.ToolDef{weather}})
		if err != nil {
			t.Fatal(err)
		}
		tc := r.Message.ToolCalls
		if len(tc) != 2 || tc[0].ID != "call_12345xyz" || tc[1].Function.Arguments != `{"location":"Bogotá, Colombia"}` ||
			r.FinishReason != "tool_calls" || r.Usage.PromptTokens != 291 || r.Usage.CompletionTokens != 54 {
			t.Fatalf("response %+v", r)
		}
		sent := srv.Requests()[0]
		if len(sent.Tools) != 1 || sent.Tools[0].Name != "get_weather" || sent.Tools[0].Function != nil || sent.Store == nil || *sent.Store {
			t.Fatalf("request tools %+v store %v", sent.Tools, sent.Store)
		}
	})
	t.Run("message", func(t *testing.T) {
		srv := responsestest.NewServer(t, responsestest.Sequence(responsestest.Reply{Body: fixture(t, "response_message.json")}))
		r, err := newModel(t, srv, responses.Config{}).Complete(t.Context(), loop.Request{Messages: hi})
		if err != nil || r.FinishReason != "stop" || !strings.HasPrefix(r.Message.Content, "It is 14°C") {
			t.Fatalf("r %+v err %v", r, err)
		}
	})
	t.Run("incomplete with a function call", func(t *testing.T) {
		srv := responsestest.NewServer(t, responsestest.Sequence(responsestest.Reply{Body: fixture(t, "response_incomplete_function_call.json")}))
		_, err := newModel(t, srv, responses.Config{}).Complete(t.Context(), loop.Request{Messages: hi})
		if !errors.Is(err, modelhttp.ErrBadResponse) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("the API's refusal of an unanswered call is not retried", func(t *testing.T) {
		srv := responsestest.NewServer(t, responsestest.Sequence(responsestest.Reply{Status: 400, Body: fixture(t, "error_no_tool_output.json")}))
		_, err := newModel(t, srv, responses.Config{}).Complete(t.Context(), loop.Request{Messages: hi})
		var apiErr *modelhttp.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "No tool output found") ||
			strings.Contains(err.Error(), "No tool output") || len(srv.Requests()) != 1 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("rate limited then ok", func(t *testing.T) {
		srv := responsestest.NewServer(t, responsestest.Sequence(
			responsestest.Reply{Status: 429, Header: http.Header{"Retry-After-Ms": {"5"}}, Body: fixture(t, "error_rate_limit.json")},
			responsestest.Reply{Status: 502},
			responsestest.Reply{Content: "ok"}))
		r, err := newModel(t, srv, responses.Config{}).Complete(t.Context(), loop.Request{Messages: hi})
		if err != nil || r.Message.Content != "ok" || len(srv.Requests()) != 3 {
			t.Fatalf("r %+v err %v", r, err)
		}
	})
}

// With PreviousResponseID, a turn whose last assistant message is what the
// previous response returned sends only the function_call_outputs after
// it; otherwise — ids renamed, the server forgot the response — the full
// input, so no call_id is ever left unanswered.
func TestPreviousResponseID(t *testing.T) {
	srv := responsestest.NewServer(t, responsestest.Sequence(
		responsestest.Reply{ToolCalls: []loop.ToolCall{{ID: "c1", Function: loop.FunctionCall{Name: "get_weather", Arguments: `{}`}},
			{ID: "c2", Function: loop.FunctionCall{Name: "get_weather", Arguments: `{}`}}}},
		responsestest.Reply{Content: "done"}))
	m := newModel(t, srv, responses.Config{PreviousResponseID: true})
	r1, err := m.Complete(t.Context(), loop.Request{Messages: hi, Tools: []loop.ToolDef{weather}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := append(append([]loop.Message(nil), hi...), loop.Message{Role: "assistant", ToolCalls: r1.Message.ToolCalls},
		loop.Message{Role: "tool", ToolCallID: "c1", Content: "a"}, loop.Message{Role: "tool", ToolCallID: "c2", Content: "b"})
	if _, err := m.Complete(t.Context(), loop.Request{Messages: msgs, Tools: []loop.ToolDef{weather}}); err != nil {
		t.Fatal(err)
	}
	req := srv.Requests()[1]
	if req.PreviousResponseID != "resp_0000" || len(req.Input) != 2 || req.Input[0].Type != "function_call_output" {
		t.Fatalf("chained request: previous %q, %d items", req.PreviousResponseID, len(req.Input))
	}

	// The loop renamed an id: the stored response does not match, so the
	// full input goes.
	renamed := append([]loop.Message(nil), msgs...)
	renamed[1].ToolCalls = append([]loop.ToolCall(nil), renamed[1].ToolCalls...)
	renamed[1].ToolCalls[1].ID = "call_fresh"
	renamed[3].ToolCallID = "call_fresh"
	if _, err := m.Complete(t.Context(), loop.Request{Messages: renamed}); err != nil {
		t.Fatal(err)
	}
	if req := srv.Requests()[2]; req.PreviousResponseID != "" || len(req.Input) != 5 {
		t.Fatalf("renamed ids: previous %q, %d items", req.PreviousResponseID, len(req.Input))
	}

	// The server forgot the response: refused, then sent in full.
	srv.Forget()
	if _, err := m.Complete(t.Context(), loop.Request{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if last := reqs[len(reqs)-1]; last.PreviousResponseID != "" || len(last.Input) != 5 {
		t.Fatalf("after Forget: previous %q, %d items", last.PreviousResponseID, len(last.Input))
	}
	if rej := srv.Rejected(); len(rej) != 1 || !strings.Contains(rej[0], "not found") {
		t.Fatalf("rejected %q", rej)
	}
}

func TestKeyStaysOut(t *testing.T) {
	const key = "sk-canary-9a7f"
	srv := responsestest.NewServer(t, nil)
	srv.APIKey = "other"
	_, err := newModel(t, srv, responses.Config{APIKey: key}).Complete(t.Context(), loop.Request{Messages: hi})
	var apiErr *modelhttp.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || strings.Contains(err.Error(), key) || strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("err %v", err)
	}
}
