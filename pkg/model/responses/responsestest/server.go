package responsestest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modeltest"
)

var toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Request is one Responses request as the server decoded it. Input is the
// request's own input items (a string input is one user message).
type Request struct {
	Model              string          `json:"model"`
	RawInput           json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []Tool          `json:"tools"`
	PreviousResponseID string          `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	Input              []Item          `json:"-"`
	Header             http.Header     `json:"-"`
	Body               []byte          `json:"-"`
}

// Item is one input or output item.
type Item struct {
	Type      string          `json:"type,omitempty"`
	ID        string          `json:"id,omitempty"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments *string         `json:"arguments,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	Status    string          `json:"status,omitempty"`
}

// Text is a message item's text content, or a function_call_output's output.
func (it Item) Text() string {
	raw := it.Content
	if it.Type == "function_call_output" {
		raw = it.Output
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		out = append(out, p.Text)
	}
	return strings.Join(out, "")
}

// Tool is one wire tool definition.
type Tool struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters"`
	Function   json.RawMessage `json:"function"`
}

// Reply is what the server answers to one request.
type Reply struct {
	// Status is the HTTP status. Default: 200.
	Status int
	// Header is added to the response.
	Header http.Header
	// Body, when set, is sent verbatim.
	Body string
	// Error, for a non-2xx Status without Body, is error.message.
	Error string

	// Content, Refusal, ToolCalls, ResponseStatus, IncompleteReason and
	// Usage build a 200 response object. ResponseStatus defaults to
	// "completed".
	Content          string
	Refusal          string
	ToolCalls        []loop.ToolCall
	ResponseStatus   string
	IncompleteReason string
	Usage            loop.Usage

	// Hang blocks until the client goes away; Drop closes the connection.
	Hang, Drop bool
}

// Handler decides the reply to the n-th valid request (from 0).
type Handler func(n int, req *Request) Reply

// Sequence answers the n-th valid request with replies[n], and later ones
// with the last.
func Sequence(replies ...Reply) Handler {
	return modeltest.Sequence[Request](Reply{Content: "ok"}, replies...)
}

// Server is a fake Responses API.
type Server struct {
	// URL is the base URL to configure a client with; it ends in "/v1".
	URL string
	// APIKey, when set, must arrive as a bearer token or the request gets
	// 401.
	APIKey string

	fake *modeltest.Server[Request, Reply]

	mu     sync.Mutex
	stored map[string][]Item // response id → the whole conversation, its output included
}

// NewServer starts a server answering with h, closed when the test ends.
func NewServer(tb testing.TB, h Handler) *Server {
	tb.Helper()
	s := &Server{stored: map[string][]Item{}}
	s.fake = modeltest.Start(tb, s.serve, h, Reply{Content: "ok"})
	s.URL = s.fake.URL() + "/v1"
	return s
}

// Close stops the server, releasing hanging replies. It is idempotent.
func (s *Server) Close() { s.fake.Close() }

// Requests returns every request received so far.
func (s *Server) Requests() []*Request { return s.fake.Requests() }

// Rejected returns the error messages of the requests refused for breaking
// the API's rules.
func (s *Server) Rejected() []string { return s.fake.Rejected() }

// Forget drops every stored response, as the API does when they expire.
func (s *Server) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.stored)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "Invalid URL ("+r.Method+" "+r.URL.Path+")")
		return
	}
	body, ok := modeltest.ReadBody(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "could not read the request body")
		return
	}
	req := &Request{Header: r.Header.Clone(), Body: body}
	decErr := json.Unmarshal(body, req)
	if decErr == nil {
		req.Input, decErr = decodeInput(req.RawInput)
	}
	s.fake.Add(req)
	if s.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.APIKey {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Incorrect API key provided: "+r.Header.Get("Authorization"))
		return
	}
	if decErr != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request.")
		return
	}
	s.mu.Lock()
	var history []Item
	var known bool
	if req.PreviousResponseID != "" {
		history, known = s.stored[req.PreviousResponseID]
	}
	s.mu.Unlock()
	if req.PreviousResponseID != "" && !known {
		s.reject(w, "previous_response_id", fmt.Sprintf("Previous response with id '%s' not found.", req.PreviousResponseID))
		return
	}
	conv := append(append([]Item(nil), history...), req.Input...)
	if msg, param := Check(req, conv); msg != "" {
		s.reject(w, param, msg)
		return
	}
	n, rep := s.fake.Answer(req)
	id := fmt.Sprintf("resp_%04d", n)
	if rep.Status == 0 && rep.Body == "" && !rep.Hang && !rep.Drop && (req.Store == nil || *req.Store) {
		s.mu.Lock()
		s.stored[id] = append(conv, outputItems(rep)...)
		s.mu.Unlock()
	}
	s.write(w, r, req, id, rep)
}

func (s *Server) reject(w http.ResponseWriter, param, msg string) {
	s.fake.Reject(msg)
	modeltest.WriteOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "", param, msg)
}

func decodeInput(raw json.RawMessage) ([]Item, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		return []Item{{Type: "message", Role: "user", Content: raw}}, nil
	}
	var items []Item
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	for i := range items {
		if items[i].Type == "" && items[i].Role != "" {
			items[i].Type = "message"
		}
	}
	return items, nil
}

// Check applies the API's rules to req, whose whole conversation (the
// stored one of previous_response_id, then req's input) is conv. It returns
// the error message and param the API would answer 400 with, or "".
func Check(req *Request, conv []Item) (msg, param string) {
	if req.Model == "" {
		return "Missing required parameter: 'model'.", "model"
	}
	if len(req.Input) == 0 && req.PreviousResponseID == "" {
		return "Missing required parameter: 'input'.", "input"
	}
	for i, t := range req.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		switch {
		case t.Type != "function":
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'function', 'file_search', 'web_search', 'computer_use_preview', 'mcp', 'code_interpreter', 'image_generation', 'local_shell', 'custom'.", t.Type), at + ".type"
		case t.Name == "" && len(t.Function) > 0:
			return fmt.Sprintf("Missing required parameter: '%s.name'.", at), at + ".name"
		case !toolNamePattern.MatchString(t.Name):
			return fmt.Sprintf("Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", at), at + ".name"
		}
	}
	calls := map[string]bool{} // call_id → answered
	var order []string         // call ids in order
	for i, it := range conv {
		switch it.Type {
		case "message":
			switch it.Role {
			case "user", "assistant", "system", "developer":
			default:
				return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", it.Role), fmt.Sprintf("input[%d].role", i)
			}
		case "function_call":
			if it.CallID == "" {
				return fmt.Sprintf("Missing required parameter: 'input[%d].call_id'.", i), fmt.Sprintf("input[%d].call_id", i)
			}
			if it.Arguments == nil {
				return fmt.Sprintf("Missing required parameter: 'input[%d].arguments'.", i), fmt.Sprintf("input[%d].arguments", i)
			}
			if _, dup := calls[it.CallID]; dup {
				return fmt.Sprintf("Duplicate value for 'call_id' of %s in 'input'.", it.CallID), "input"
			}
			calls[it.CallID] = false
			order = append(order, it.CallID)
		case "function_call_output":
			answered, ok := calls[it.CallID]
			if !ok {
				return fmt.Sprintf("No tool call found for function call output with call_id %s.", it.CallID), "input"
			}
			if answered {
				return fmt.Sprintf("Duplicate function_call_output for call_id %s.", it.CallID), "input"
			}
			calls[it.CallID] = true
		case "reasoning":
		default:
			return fmt.Sprintf("Invalid value: '%s'.", it.Type), fmt.Sprintf("input[%d].type", i)
		}
	}
	for _, id := range order {
		if !calls[id] {
			return fmt.Sprintf("No tool output found for function call %s.", id), "input"
		}
	}
	return "", ""
}

func outputItems(rep Reply) []Item {
	var items []Item
	for i, tc := range rep.ToolCalls {
		args := tc.Function.Arguments
		items = append(items, Item{Type: "function_call", ID: fmt.Sprintf("fc_%d", i), CallID: tc.ID,
			Name: tc.Function.Name, Arguments: &args, Status: "completed"})
	}
	if rep.Content != "" || rep.Refusal != "" {
		part := map[string]any{"type": "output_text", "text": rep.Content, "annotations": []any{}}
		if rep.Content == "" {
			part = map[string]any{"type": "refusal", "refusal": rep.Refusal}
		}
		c, _ := json.Marshal([]any{part})
		items = append(items, Item{Type: "message", ID: "msg_0", Role: "assistant", Content: c, Status: "completed"})
	}
	return items
}

// ResponseObject builds the response object a 200 reply carries.
func ResponseObject(id string, req *Request, rep Reply) map[string]any {
	status := rep.ResponseStatus
	if status == "" {
		status = "completed"
	}
	var incomplete any
	if rep.IncompleteReason != "" {
		incomplete = map[string]any{"reason": rep.IncompleteReason}
	}
	var prev any
	if req != nil && req.PreviousResponseID != "" {
		prev = req.PreviousResponseID
	}
	return map[string]any{
		"id": id, "object": "response", "created_at": 1700000000, "status": status,
		"model": "test-model", "output": outputItems(rep), "error": nil,
		"incomplete_details": incomplete, "previous_response_id": prev,
		"parallel_tool_calls": true, "tools": []any{}, "tool_choice": "auto",
		"usage": map[string]any{
			"input_tokens": rep.Usage.PromptTokens, "output_tokens": rep.Usage.CompletionTokens,
			"total_tokens":         rep.Usage.PromptTokens + rep.Usage.CompletionTokens,
			"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		},
	}
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, req *Request, id string, rep Reply) {
	status, done := s.fake.Write(w, r, modeltest.Reply{Status: rep.Status, Header: rep.Header, Body: rep.Body,
		Hang: rep.Hang, Drop: rep.Drop})
	if done {
		return
	}
	if status >= 300 {
		writeError(w, status, modeltest.OpenAIErrorType(status), "", rep.Error)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ResponseObject(id, req, rep))
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	modeltest.WriteOpenAIError(w, status, typ, code, "", msg)
}
