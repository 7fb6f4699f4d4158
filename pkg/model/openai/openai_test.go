package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
)

const canaryKey = "sk-canary-3f9d2a7c1e"

// newModel returns a model pointed at srv with short retry delays.
func newModel(tb testing.TB, srv *openaitest.Server, mutate func(*openai.Config)) *openai.Model {
	tb.Helper()
	cfg := openai.Config{
		Model:          "test-model",
		BaseURL:        srv.URL,
		APIKey:         srv.APIKey,
		RequestTimeout: 5 * time.Second,
		RetryBaseDelay: time.Millisecond,
		MaxRetryDelay:  20 * time.Millisecond,
		Logger:         zerolog.New(zerolog.NewTestWriter(tb)),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := openai.New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return m
}

func call(id, name, args string) loop.ToolCall {
	return loop.ToolCall{ID: id, Type: "function", Function: loop.FunctionCall{Name: name, Arguments: args}}
}

func userOnly(text string) loop.Request {
	return loop.Request{Messages: []loop.Message{{Role: "user", Content: text}}}
}

var calculatorSchema = json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","maxLength":12345678901234567890}},"required":["expression"],"additionalProperties":false}`)

func TestCompleteMapsRequestAndResponse(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{
		Content: "thinking",
		ToolCalls: []loop.ToolCall{
			call("call_a", "calculator", `{"expression":"(17 + 25) * 3"}`),
			call("call_b", "echo", `{"text":"hi"}`),
		},
		Usage: loop.Usage{PromptTokens: 42, CompletionTokens: 7},
	}))
	temp := 0.25
	m := newModel(t, srv, func(c *openai.Config) { c.Temperature = &temp; c.MaxTokens = 256 })
	resp, err := m.Complete(t.Context(), loop.Request{
		Messages: []loop.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "compute"},
		},
		Tools: []loop.ToolDef{
			{Name: "calculator", Description: "Evaluates arithmetic.", Parameters: calculatorSchema},
			{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)},
		},
	})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("requests=%d, want 1", len(reqs))
	}
	got := reqs[0]
	if got.Model != "test-model" {
		t.Errorf("model=%q, want test-model", got.Model)
	}
	if got.Temperature == nil || *got.Temperature != 0.25 {
		t.Errorf("temperature=%v, want 0.25", got.Temperature)
	}
	if got.MaxCompletionTokens == nil || *got.MaxCompletionTokens != 256 {
		t.Errorf("max_completion_tokens=%v, want 256", got.MaxCompletionTokens)
	}
	if len(got.Messages) != 2 || got.Messages[0].Role != "system" || got.Messages[0].Text() != "be brief" ||
		got.Messages[1].Role != "user" || got.Messages[1].Text() != "compute" {
		t.Errorf("messages=%+v", got.Messages)
	}
	if len(got.Tools) != 2 {
		t.Fatalf("tools=%d, want 2", len(got.Tools))
	}
	tool := got.Tools[0]
	if tool.Type != "function" || tool.Function.Name != "calculator" || tool.Function.Description != "Evaluates arithmetic." {
		t.Errorf("tool[0]=%+v", tool)
	}
	// The schema arrives with the same meaning and its numbers untouched.
	var want, have any
	_ = json.Unmarshal(calculatorSchema, &want)
	_ = json.Unmarshal(tool.Function.Parameters, &have)
	if fmt.Sprint(want) != fmt.Sprint(have) {
		t.Errorf("parameters=%s, want %s", tool.Function.Parameters, calculatorSchema)
	}
	if !bytes.Contains(tool.Function.Parameters, []byte("12345678901234567890")) {
		t.Errorf("parameters lost the exact number: %s", tool.Function.Parameters)
	}
	if strings.Contains(string(got.Body), `"description":""`) {
		t.Errorf("empty description sent: %s", got.Body)
	}

	if resp.Message.Role != "assistant" || resp.Message.Content != "thinking" {
		t.Errorf("message=%+v", resp.Message)
	}
	wantCalls := []loop.ToolCall{
		call("call_a", "calculator", `{"expression":"(17 + 25) * 3"}`),
		call("call_b", "echo", `{"text":"hi"}`),
	}
	if fmt.Sprint(resp.Message.ToolCalls) != fmt.Sprint(wantCalls) {
		t.Errorf("tool calls=%+v, want %+v", resp.Message.ToolCalls, wantCalls)
	}
	if resp.Usage != (loop.Usage{PromptTokens: 42, CompletionTokens: 7}) {
		t.Errorf("usage=%+v", resp.Usage)
	}
	if resp.FinishReason != "tool_calls" {
		t.Errorf("finish reason=%q, want tool_calls", resp.FinishReason)
	}
}

// transcript is a two-round conversation in which every call is answered.
func transcript() []loop.Message {
	return []loop.Message{
		{Role: "system", Content: "sys"},
		{Role: "user", Content: "go"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{
			call("c1", "calculator", `{"expression":"1+1"}`),
			call("c2", "calculator", `{not json`),
		}},
		{Role: "tool", ToolCallID: "c1", Content: "2"},
		{Role: "tool", ToolCallID: "c2", Content: "Tool 'calculator' argument error: not JSON"},
		{Role: "assistant", Content: "one more", ToolCalls: []loop.ToolCall{call("c3", "echo", `{}`)}},
		{Role: "tool", ToolCallID: "c3", Content: ""},
	}
}

func TestMultiTurnTranscriptAccepted(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Content: "done"}))
	m := newModel(t, srv, nil)
	resp, err := m.Complete(t.Context(), loop.Request{Messages: transcript()})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Message.Content != "done" || resp.FinishReason != "stop" || len(resp.Message.ToolCalls) != 0 {
		t.Errorf("response=%+v", resp)
	}
	got := srv.Requests()[0].Messages
	if len(got) != 7 {
		t.Fatalf("messages=%d, want 7", len(got))
	}
	a := got[2]
	if a.Role != "assistant" || len(a.ToolCalls) != 2 || a.ToolCalls[1].ID != "c2" ||
		a.ToolCalls[1].Function.Arguments != `{not json` || a.ToolCalls[0].Type != "function" {
		t.Errorf("assistant message=%+v", a)
	}
	if len(a.Content) != 0 && string(a.Content) != "null" {
		t.Errorf("assistant content=%s, want absent for a tool-only message", a.Content)
	}
	if got[5].Text() != "one more" {
		t.Errorf("assistant content=%s, want \"one more\"", got[5].Content)
	}
	if got[4].Role != "tool" || got[4].ToolCallID != "c2" || got[6].ToolCallID != "c3" {
		t.Errorf("tool messages=%+v %+v", got[4], got[6])
	}
	if string(got[6].Content) != `""` {
		t.Errorf("empty tool content=%s, want \"\"", got[6].Content)
	}
}

// TestServerRefusesUnansweredCalls proves the test server enforces the API's
// rule, so the acceptance above means something.
func TestServerRefusesUnansweredCalls(t *testing.T) {
	full := transcript()
	tests := []struct {
		name string
		msgs []loop.Message
		want string
	}{
		{"last call unanswered", full[:6], openaitest.OrphanMessage},
		{"one of two unanswered", append(append([]loop.Message{}, full[:4]...), full[5:]...), openaitest.OrphanMessage},
		{"user message before the answers", append(append(append([]loop.Message{}, full[:3]...), loop.Message{Role: "user", Content: "x"}), full[3:]...), openaitest.OrphanMessage},
		{"unknown id", append(append([]loop.Message{}, full[:5]...), loop.Message{Role: "tool", ToolCallID: "nope", Content: "x"}), openaitest.UnexpectedToolMessage},
		{"tool without a call", []loop.Message{{Role: "user", Content: "x"}, {Role: "tool", ToolCallID: "c1", Content: "x"}}, openaitest.UnexpectedToolMessage},
		{"answered twice", append(append([]loop.Message{}, full[:5]...), full[3]), "Duplicate tool message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, nil)
			m := newModel(t, srv, nil)
			_, err := m.Complete(t.Context(), loop.Request{Messages: tt.msgs})
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err=%v, want *APIError", err)
			}
			if apiErr.StatusCode != http.StatusBadRequest || apiErr.Type != "invalid_request_error" {
				t.Errorf("status=%d type=%q, want 400 invalid_request_error", apiErr.StatusCode, apiErr.Type)
			}
			if !strings.Contains(apiErr.Message, tt.want) {
				t.Errorf("message=%q, want it to contain %q", apiErr.Message, tt.want)
			}
			if strings.Contains(err.Error(), apiErr.Message) {
				t.Errorf("Error() quotes the server message: %v", err)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("requests=%d, want 1 (400 is not retried)", n)
			}
			if srv.Rejected() != 1 {
				t.Errorf("rejected=%d, want 1", srv.Rejected())
			}
		})
	}
}

func TestRetries(t *testing.T) {
	retryNow := http.Header{"Retry-After": {"0"}}
	tests := []struct {
		name      string
		replies   []openaitest.Reply
		retries   int
		wantCalls int
		wantErr   int // HTTP status of the final error, 0 for success
	}{
		{"429 then 500 then ok", []openaitest.Reply{
			{Status: 429, Header: retryNow}, {Status: 500}, {Content: "ok"},
		}, 0, 3, 0},
		{"429 with Retry-After-Ms", []openaitest.Reply{
			{Status: 429, Header: http.Header{"Retry-After-Ms": {"5"}}}, {Content: "ok"},
		}, 0, 2, 0},
		{"502 503 504 then ok", []openaitest.Reply{{Status: 502}, {Status: 503}, {Status: 504}, {Content: "ok"}}, 0, 4, 0},
		{"500 exhausts retries", []openaitest.Reply{{Status: 500}}, 2, 3, 500},
		{"retries disabled", []openaitest.Reply{{Status: 503}, {Content: "ok"}}, -1, 1, 503},
		{"400 not retried", []openaitest.Reply{{Status: 400, Error: "bad"}, {Content: "ok"}}, 0, 1, 400},
		{"401 not retried", []openaitest.Reply{{Status: 401}, {Content: "ok"}}, 0, 1, 401},
		{"404 not retried", []openaitest.Reply{{Status: 404}, {Content: "ok"}}, 0, 1, 404},
		{"Retry-After beyond the bound not retried", []openaitest.Reply{
			{Status: 429, Header: http.Header{"Retry-After": {"3600"}}}, {Content: "ok"},
		}, 0, 1, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(tt.replies...))
			m := newModel(t, srv, func(c *openai.Config) { c.MaxRetries = tt.retries })
			resp, err := m.Complete(t.Context(), userOnly("hi"))
			if n := len(srv.Requests()); n != tt.wantCalls {
				t.Errorf("requests=%d, want %d", n, tt.wantCalls)
			}
			if tt.wantErr == 0 {
				if err != nil || resp.Message.Content != "ok" {
					t.Fatalf("resp=%+v err=%v, want ok", resp, err)
				}
				return
			}
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.wantErr {
				t.Fatalf("err=%v, want APIError %d", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tt.wantErr)) {
				t.Errorf("error %q does not name the status", err)
			}
		})
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Status: 429, Header: http.Header{"Retry-After-Ms": {"150"}}},
		openaitest.Reply{Content: "ok"},
	))
	m := newModel(t, srv, func(c *openai.Config) { c.MaxRetryDelay = time.Second })
	start := time.Now()
	if _, err := m.Complete(t.Context(), userOnly("hi")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("retried after %v, want >= 150ms as the server asked", d)
	}
}

func TestTransportErrorRetried(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Drop: true}, openaitest.Reply{Drop: true}, openaitest.Reply{Content: "ok"},
	))
	m := newModel(t, srv, nil)
	resp, err := m.Complete(t.Context(), userOnly("hi"))
	if err != nil || resp.Message.Content != "ok" {
		t.Fatalf("resp=%+v err=%v, want ok after two dropped connections", resp, err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("requests=%d, want 3", n)
	}
}

func TestTransportErrorNoServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	m, err := openai.New(openai.Config{
		Model: "m", BaseURL: "http://" + addr + "/v1?api-key=" + canaryKey, APIKey: canaryKey,
		MaxRetries: 2, RetryBaseDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Complete(t.Context(), userOnly("hi"))
	var terr *openai.TransportError
	if !errors.As(err, &terr) {
		t.Fatalf("err=%v, want *TransportError", err)
	}
	if !strings.Contains(err.Error(), "after 3 attempt") {
		t.Errorf("err=%q, want 3 attempts", err)
	}
	if strings.Contains(err.Error(), canaryKey) || strings.Contains(err.Error(), "/v1") {
		t.Errorf("transport error names the URL or key: %q", err)
	}
}

func TestRequestTimeout(t *testing.T) {
	t.Run("hanging server", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Hang: true}))
		m := newModel(t, srv, func(c *openai.Config) { c.RequestTimeout = 100 * time.Millisecond; c.MaxRetries = -1 })
		start := time.Now()
		_, err := m.Complete(t.Context(), userOnly("hi"))
		elapsed := time.Since(start)
		if !errors.Is(err, openai.ErrTimeout) {
			t.Fatalf("err=%v, want ErrTimeout", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("an attempt timeout must not look like the caller's deadline: %v", err)
		}
		if elapsed < 100*time.Millisecond || elapsed > time.Second {
			t.Errorf("returned after %v, want about 100ms", elapsed)
		}
	})
	t.Run("timeout retried", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Hang: true}, openaitest.Reply{Content: "ok"}))
		m := newModel(t, srv, func(c *openai.Config) { c.RequestTimeout = 100 * time.Millisecond })
		resp, err := m.Complete(t.Context(), userOnly("hi"))
		if err != nil || resp.Message.Content != "ok" {
			t.Fatalf("resp=%+v err=%v, want ok on the second attempt", resp, err)
		}
	})
	t.Run("caller deadline wins", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Hang: true}))
		m := newModel(t, srv, func(c *openai.Config) { c.RequestTimeout = time.Minute })
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := m.Complete(ctx, userOnly("hi"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err=%v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("returned after %v, want about 100ms", d)
		}
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("requests=%d, want 1 (no retry after the caller's deadline)", n)
		}
	})
	t.Run("cancel during backoff", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Status: 503}))
		m := newModel(t, srv, func(c *openai.Config) { c.RetryBaseDelay = time.Minute; c.MaxRetryDelay = time.Minute })
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			deadline := time.Now().Add(5 * time.Second)
			for len(srv.Requests()) == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		start := time.Now()
		_, err := m.Complete(ctx, userOnly("hi"))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err=%v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("returned after %v", d)
		}
	})
}

func TestAPIKey(t *testing.T) {
	t.Run("sent as bearer", func(t *testing.T) {
		srv := openaitest.NewServer(t, nil)
		srv.APIKey = canaryKey
		m := newModel(t, srv, nil)
		if _, err := m.Complete(t.Context(), userOnly("hi")); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+canaryKey {
			t.Errorf("Authorization=%q, want the bearer key", got)
		}
	})
	t.Run("never in errors or logs", func(t *testing.T) {
		srv := openaitest.NewServer(t, nil)
		srv.APIKey = "sk-the-right-one"
		var logs bytes.Buffer
		m := newModel(t, srv, func(c *openai.Config) {
			c.APIKey = canaryKey
			c.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel)
		})
		_, err := m.Complete(t.Context(), userOnly("secret prompt canary-prompt-77"))
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
			t.Fatalf("err=%v, want 401", err)
		}
		// The server echoed the key in its message; nothing of it leaks.
		if !strings.Contains(apiErr.Message, canaryKey) {
			t.Fatalf("test server did not echo the key: %q", apiErr.Message)
		}
		for _, s := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", errors.Unwrap(err)), logs.String()} {
			if strings.Contains(s, canaryKey) || strings.Contains(s, "canary-prompt-77") {
				t.Errorf("key or prompt leaked: %q", s)
			}
		}
		if !strings.Contains(err.Error(), "401") {
			t.Errorf("err=%q, want the status code", err)
		}
	})
	t.Run("empty key sends no header", func(t *testing.T) {
		t.Setenv(openai.EnvAPIKey, "")
		srv := openaitest.NewServer(t, nil)
		m := newModel(t, srv, nil)
		if _, err := m.Complete(t.Context(), userOnly("hi")); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if got, ok := srv.Requests()[0].Header["Authorization"]; ok {
			t.Errorf("Authorization=%q, want none", got)
		}
	})
}

func TestLogsCarryNoContent(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Status: 500},
		openaitest.Reply{Content: "answer-canary-11", ToolCalls: []loop.ToolCall{call("c1", "calculator", `{"expression":"args-canary-22"}`)}},
	))
	var logs bytes.Buffer
	m := newModel(t, srv, func(c *openai.Config) { c.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel) })
	if _, err := m.Complete(t.Context(), loop.Request{Messages: transcript()}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	out := logs.String()
	for _, s := range []string{"answer-canary-11", "args-canary-22", "1+1", "not JSON", "expression"} {
		if strings.Contains(out, s) {
			t.Errorf("logs contain %q: %s", s, out)
		}
	}
	for _, s := range []string{`"attempt":2`, `"tool_calls":1`, `"error_kind":"http_500"`} {
		if !strings.Contains(out, s) {
			t.Errorf("logs lack %s: %s", s, out)
		}
	}
}

func TestToolCallArgumentsVerbatim(t *testing.T) {
	args := []string{`{not json`, `{"a":1,}`, ``, `"just a string"`, `{"deep":` + strings.Repeat("[", 50), "{\"x\":\"\u2028\\u0000\"}"}
	var calls []loop.ToolCall
	for i, a := range args {
		calls = append(calls, call(fmt.Sprintf("c%d", i), "calculator", a))
	}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{ToolCalls: calls}))
	m := newModel(t, srv, nil)
	resp, err := m.Complete(t.Context(), userOnly("hi"))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if len(resp.Message.ToolCalls) != len(args) {
		t.Fatalf("tool calls=%d, want %d", len(resp.Message.ToolCalls), len(args))
	}
	for i, tc := range resp.Message.ToolCalls {
		if tc.Function.Arguments != args[i] || tc.ID != fmt.Sprintf("c%d", i) {
			t.Errorf("call %d: id=%q args=%q, want %q", i, tc.ID, tc.Function.Arguments, args[i])
		}
	}
}

func TestToolCallArgumentsAsObject(t *testing.T) {
	// Some compatible servers send arguments as an object, not a string.
	body := `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"calculator","arguments":{"expression":"1+1"}}}]}}]}`
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Body: body}))
	m := newModel(t, srv, nil)
	resp, err := m.Complete(t.Context(), userOnly("hi"))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got := resp.Message.ToolCalls[0].Function.Arguments; got != `{"expression":"1+1"}` {
		t.Errorf("arguments=%q, want the object's text", got)
	}
}

// manyCalls is a chat completion with n tool calls.
func manyCalls(n int) string {
	var b strings.Builder
	b.WriteString(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":"c%d","type":"function","function":{"name":"echo","arguments":"{}"}}`, i)
	}
	b.WriteString(`]}}]}`)
	return b.String()
}

func TestBadResponses(t *testing.T) {
	big := `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"` + strings.Repeat("x", 4096) + `"}}]}`
	tests := []struct {
		name    string
		reply   openaitest.Reply
		wantErr error
	}{
		{"no choices", openaitest.Reply{Body: `{"id":"x","object":"chat.completion","choices":[]}`}, openai.ErrBadResponse},
		{"not JSON", openaitest.Reply{Body: `<html>gateway</html>`}, openai.ErrBadResponse},
		{"too large", openaitest.Reply{Body: big}, openai.ErrResponseTooLarge},
		{"too large error body", openaitest.Reply{Status: 500, Body: `{"error":{"message":"` + strings.Repeat("y", 4096) + `"}}`}, openai.ErrResponseTooLarge},
		{"too large, chunked", openaitest.Reply{Body: big, Chunked: true}, openai.ErrResponseTooLarge},
		{"too large, chunked, many calls", openaitest.Reply{Body: manyCalls(2000), Chunked: true}, openai.ErrResponseTooLarge},
		{"too large error body, chunked", openaitest.Reply{Status: 500, Body: `{"error":{"message":"` + strings.Repeat("y", 4096) + `"}}`, Chunked: true}, openai.ErrResponseTooLarge},
		{"too large 400 body, chunked", openaitest.Reply{Status: 400, Body: `{"error":{"message":"` + strings.Repeat("y", 4096) + `"}}`, Chunked: true}, openai.ErrResponseTooLarge},
		{"too large, chunked, limit inside a string", openaitest.Reply{Body: `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"` + strings.Repeat("z", 990) + `"}}]}`, Chunked: true}, openai.ErrResponseTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(tt.reply, openaitest.Reply{Content: "ok"}))
			m := newModel(t, srv, func(c *openai.Config) { c.MaxResponseBytes = 1024 })
			_, err := m.Complete(t.Context(), userOnly("hi"))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err=%v, want %v", err, tt.wantErr)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("requests=%d, want 1 (not retried)", n)
			}
		})
	}
}

func TestInvalidRequestNotSent(t *testing.T) {
	tests := []struct {
		name string
		req  loop.Request
	}{
		{"unknown role", loop.Request{Messages: []loop.Message{{Role: "wizard", Content: "x"}}}},
		{"parameters not an object", loop.Request{Messages: []loop.Message{{Role: "user"}}, Tools: []loop.ToolDef{{Name: "t", Parameters: json.RawMessage(`[1]`)}}}},
		{"parameters not JSON", loop.Request{Messages: []loop.Message{{Role: "user"}}, Tools: []loop.ToolDef{{Name: "t", Parameters: json.RawMessage(`{`)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, nil)
			m := newModel(t, srv, nil)
			_, err := m.Complete(t.Context(), tt.req)
			if !errors.Is(err, openai.ErrInvalidRequest) {
				t.Fatalf("err=%v, want ErrInvalidRequest", err)
			}
			if n := len(srv.Requests()); n != 0 {
				t.Errorf("requests=%d, want 0", n)
			}
		})
	}
}

func TestBaseURL(t *testing.T) {
	t.Run("explicit", func(t *testing.T) {
		srv := openaitest.NewServer(t, nil)
		other := openaitest.NewServer(t, nil)
		t.Setenv(openai.EnvBaseURL, other.URL)
		m := newModel(t, srv, nil)
		if _, err := m.Complete(t.Context(), userOnly("hi")); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if len(srv.Requests()) != 1 || len(other.Requests()) != 0 {
			t.Errorf("requests: configured=%d env=%d, want 1 and 0", len(srv.Requests()), len(other.Requests()))
		}
		if p := srv.Requests()[0].Path; p != "/v1/chat/completions" {
			t.Errorf("path=%q", p)
		}
	})
	t.Run("from environment", func(t *testing.T) {
		srv := openaitest.NewServer(t, nil)
		srv.APIKey = canaryKey
		t.Setenv(openai.EnvBaseURL, srv.URL)
		t.Setenv(openai.EnvAPIKey, canaryKey)
		m, err := openai.New(openai.Config{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Complete(t.Context(), userOnly("hi")); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if len(srv.Requests()) != 1 {
			t.Errorf("requests=%d, want 1", len(srv.Requests()))
		}
	})
	t.Run("trailing slash", func(t *testing.T) {
		srv := openaitest.NewServer(t, nil)
		m := newModel(t, srv, func(c *openai.Config) { c.BaseURL = srv.URL + "/" })
		if _, err := m.Complete(t.Context(), userOnly("hi")); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	})
}

func TestConfigValidation(t *testing.T) {
	nan := func() *float64 { v := -1.0; return &v }
	tests := []struct {
		name  string
		cfg   openai.Config
		field string
	}{
		{"no model", openai.Config{BaseURL: "http://x"}, "Model"},
		{"relative URL", openai.Config{Model: "m", BaseURL: "localhost:8000"}, "BaseURL"},
		{"ftp URL", openai.Config{Model: "m", BaseURL: "ftp://x/v1"}, "BaseURL"},
		{"negative timeout", openai.Config{Model: "m", BaseURL: "http://x", RequestTimeout: -1}, "RequestTimeout"},
		{"too many retries", openai.Config{Model: "m", BaseURL: "http://x", MaxRetries: 1000}, "MaxRetries"},
		{"base above max delay", openai.Config{Model: "m", BaseURL: "http://x", RetryBaseDelay: time.Minute, MaxRetryDelay: time.Second}, "RetryBaseDelay"},
		{"negative temperature", openai.Config{Model: "m", BaseURL: "http://x", Temperature: nan()}, "Temperature"},
		{"negative max tokens", openai.Config{Model: "m", BaseURL: "http://x", MaxTokens: -1}, "MaxTokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := openai.New(tt.cfg)
			var verr *openai.ValidationError
			if !errors.As(err, &verr) || verr.Field != tt.field {
				t.Fatalf("err=%v, want ValidationError on %s", err, tt.field)
			}
		})
	}
	t.Run("key never quoted", func(t *testing.T) {
		_, err := openai.New(openai.Config{Model: "m", BaseURL: "ftp://user:" + canaryKey + "@x", APIKey: canaryKey})
		if err == nil || strings.Contains(err.Error(), canaryKey) {
			t.Errorf("err=%v", err)
		}
	})
	t.Run("defaults are valid", func(t *testing.T) {
		t.Setenv(openai.EnvBaseURL, "")
		if err := (openai.Config{Model: "m"}).Validate(); err != nil {
			t.Errorf("Validate: %v", err)
		}
	})
}

func TestConcurrentCompletes(t *testing.T) {
	srv := openaitest.NewServer(t, func(n int, req *openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Content: "echo:" + req.Messages[0].Text()}
	})
	m := newModel(t, srv, nil)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			want := fmt.Sprintf("q%d", i)
			resp, err := m.Complete(t.Context(), userOnly(want))
			if err == nil && resp.Message.Content != "echo:"+want {
				err = fmt.Errorf("content=%q, want echo:%s", resp.Message.Content, want)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
