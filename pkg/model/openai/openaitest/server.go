package openaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modeltest"
)

// OrphanMessage starts the API's error message for an assistant message whose
// tool calls are not all answered.
const OrphanMessage = "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'."

// UnexpectedToolMessage is the API's error message for a tool message that
// does not answer a call of the assistant message before it.
const UnexpectedToolMessage = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."

// Request is one chat-completions request as the server decoded it.
type Request struct {
	Model               string      `json:"model"`
	Messages            []Message   `json:"messages"`
	Tools               []Tool      `json:"tools"`
	Temperature         *float64    `json:"temperature"`
	MaxCompletionTokens *int        `json:"max_completion_tokens"`
	MaxTokens           *int        `json:"max_tokens"`
	Stream              bool        `json:"stream"`
	Header              http.Header `json:"-"`
	Path                string      `json:"-"`
	Body                []byte      `json:"-"`
}

// Message is one wire message. Content is kept raw: a string, null or an
// array of parts.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []loop.ToolCall `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// Text returns the content when it is a JSON string, else "".
func (m Message) Text() string {
	var s string
	_ = json.Unmarshal(m.Content, &s)
	return s
}

// Tool is one wire tool definition.
type Tool struct {
	Type     string       `json:"type"`
	Function loop.ToolDef `json:"function"`
}

// Reply is what the server answers to one request.
type Reply struct {
	// Status is the HTTP status. Default: 200.
	Status int
	// Header is added to the response (e.g. Retry-After).
	Header http.Header
	// Body, when set, is sent verbatim instead of a built response.
	Body string
	// Chunked sends Body in small flushed pieces (chunked transfer
	// encoding, no Content-Length), as a streaming proxy would.
	Chunked bool
	// Error, for a non-2xx Status without Body, is error.message.
	Error string

	// Content, ToolCalls, FinishReason and Usage build a 200 response.
	// FinishReason defaults to "tool_calls" when there are calls, else
	// "stop".
	Content      string
	ToolCalls    []loop.ToolCall
	FinishReason string
	Usage        loop.Usage

	// Hang blocks the reply until the client goes away or the server
	// closes.
	Hang bool
	// Drop closes the connection without any response: a transport error
	// for the client.
	Drop bool
}

// Handler decides the reply to the n-th request (counting from 0) that passed
// validation.
type Handler func(n int, req *Request) Reply

// Sequence answers the n-th valid request with replies[n] and every later one
// with the last reply.
func Sequence(replies ...Reply) Handler {
	return modeltest.Sequence[Request](Reply{Content: "ok"}, replies...)
}

// Server is a fake chat-completions API.
type Server struct {
	// URL is the base URL to configure a client with; it ends in "/v1".
	URL string
	// APIKey, when set, must arrive as "Authorization: Bearer <APIKey>" or
	// the request gets 401.
	APIKey string

	fake *modeltest.Server[Request, Reply]
}

// NewServer starts a server that answers with h and is closed when the test
// ends.
func NewServer(tb testing.TB, h Handler) *Server {
	tb.Helper()
	s := &Server{}
	s.fake = modeltest.Start(tb, s.serve, h, Reply{Content: "ok"})
	s.URL = s.fake.URL() + "/v1"
	return s
}

// Close stops the server, releasing hanging replies first. It is idempotent.
func (s *Server) Close() { s.fake.Close() }

// Requests returns every request received so far, valid or not.
func (s *Server) Requests() []*Request { return s.fake.Requests() }

// Rejected counts the requests refused with 400 for breaking the tool-call
// rules.
func (s *Server) Rejected() int { return len(s.fake.Rejected()) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "Invalid URL ("+r.Method+" "+r.URL.Path+")")
		return
	}
	body, ok := modeltest.ReadBody(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "could not read the request body")
		return
	}
	req := &Request{Header: r.Header.Clone(), Path: r.URL.Path, Body: body}
	dec := json.NewDecoder(bytes.NewReader(body))
	decErr := dec.Decode(req)

	s.fake.Add(req)

	if s.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.APIKey {
		// The real API echoes a masked key; this one echoes the header in
		// full, so that a client leaking error messages is caught.
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Incorrect API key provided: "+r.Header.Get("Authorization"))
		return
	}
	if decErr != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request.")
		return
	}
	if msg, param := Check(req); msg != "" {
		s.fake.Reject(msg)
		modeltest.WriteOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", param, msg)
		return
	}

	_, rep := s.fake.Answer(req)
	s.write(w, r, rep)
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, rep Reply) {
	status, done := s.fake.Write(w, r, modeltest.Reply{Status: rep.Status, Header: rep.Header, Body: rep.Body,
		Chunked: rep.Chunked, Hang: rep.Hang, Drop: rep.Drop})
	if done {
		return
	}
	if status >= 300 {
		writeError(w, status, modeltest.OpenAIErrorType(status), "", rep.Error)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Completion(rep))
}

// Completion builds the chat.completion object a 200 reply carries.
func Completion(rep Reply) map[string]any {
	finish := rep.FinishReason
	if finish == "" {
		finish = "stop"
		if len(rep.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	msg := map[string]any{"role": "assistant", "content": rep.Content, "refusal": nil}
	if rep.Content == "" && len(rep.ToolCalls) > 0 {
		msg["content"] = nil
	}
	if len(rep.ToolCalls) > 0 {
		calls := make([]map[string]any, len(rep.ToolCalls))
		for i, tc := range rep.ToolCalls {
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			calls[i] = map[string]any{
				"id":       tc.ID,
				"type":     typ,
				"function": map[string]any{"name": tc.Function.Name, "arguments": tc.Function.Arguments},
			}
		}
		msg["tool_calls"] = calls
	}
	return map[string]any{
		"id":      "chatcmpl-test",
		"object":  "chat.completion",
		"created": 1700000000,
		"model":   "test-model",
		"choices": []map[string]any{{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage": map[string]any{
			"prompt_tokens":     rep.Usage.PromptTokens,
			"completion_tokens": rep.Usage.CompletionTokens,
			"total_tokens":      rep.Usage.PromptTokens + rep.Usage.CompletionTokens,
		},
	}
}

// Check applies the API's transcript rules to req and returns the error
// message and parameter the API would answer with, or "" when req passes.
func Check(req *Request) (msg, param string) {
	if req.Model == "" {
		return "you must provide a model parameter", "model"
	}
	if len(req.Messages) == 0 {
		return "[] is too short - 'messages'", "messages"
	}
	var pending map[string]bool // ids of the last assistant message not yet answered
	var order []string
	flush := func() string {
		var missing []string
		for _, id := range order {
			if pending[id] {
				missing = append(missing, id)
			}
		}
		pending, order = nil, nil
		if len(missing) > 0 {
			return OrphanMessage + " The following tool_call_ids did not have response messages: " + strings.Join(missing, ", ")
		}
		return ""
	}
	answered := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "tool":
			if pending == nil {
				return UnexpectedToolMessage, fmt.Sprintf("messages.[%d].role", i)
			}
			if _, ok := pending[m.ToolCallID]; !ok {
				return UnexpectedToolMessage, fmt.Sprintf("messages.[%d].role", i)
			}
			if answered[m.ToolCallID] {
				return fmt.Sprintf("Duplicate tool message for tool_call_id %s.", m.ToolCallID), fmt.Sprintf("messages.[%d]", i)
			}
			answered[m.ToolCallID] = true
			pending[m.ToolCallID] = false
			continue
		case "system", "developer", "user", "assistant":
		default:
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role),
				fmt.Sprintf("messages[%d].role", i)
		}
		if msg := flush(); msg != "" {
			return msg, "messages.[" + fmt.Sprint(i) + "].role"
		}
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			pending = make(map[string]bool, len(m.ToolCalls))
			answered = map[string]bool{}
			for _, tc := range m.ToolCalls {
				if _, dup := pending[tc.ID]; !dup {
					order = append(order, tc.ID)
				}
				pending[tc.ID] = true
			}
		}
	}
	if msg := flush(); msg != "" {
		return msg, "messages"
	}
	return "", ""
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	modeltest.WriteOpenAIError(w, status, typ, code, "", msg)
}
