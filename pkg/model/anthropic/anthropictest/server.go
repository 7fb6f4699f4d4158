package anthropictest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modeltest"
)

// Error texts of the Messages API, as it words them.
const (
	// OrphanToolUse starts the error for tool_use blocks not answered in the
	// next message.
	OrphanToolUse = "`tool_use` ids were found without `tool_result` blocks immediately after: "
	// OrphanToolUseTail ends it.
	OrphanToolUseTail = ". Each `tool_use` block must have a corresponding `tool_result` block in the next message."
	// UnexpectedToolResult starts the error for a tool_result without its
	// tool_use in the previous message.
	UnexpectedToolResult = "unexpected `tool_use_id` found in `tool_result` blocks: "
	// UnexpectedToolResultTail ends it.
	UnexpectedToolResultTail = ". Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
)

var (
	toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	toolIDPattern   = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
)

// Request is one Messages request as the server decoded it.
type Request struct {
	Model      string          `json:"model"`
	MaxTokens  *int            `json:"max_tokens"`
	System     json.RawMessage `json:"system"`
	Messages   []Message       `json:"messages"`
	Tools      []Tool          `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	Stream     bool            `json:"stream"`
	Header     http.Header     `json:"-"`
	Body       []byte          `json:"-"`
}

// Message is one wire message; Content is a string or an array of blocks.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Block is one content block.
type Block struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   *bool           `json:"is_error,omitempty"`
}

// Blocks returns the message's content as blocks (a string is one text
// block).
func (m Message) Blocks() ([]Block, error) {
	c := bytes.TrimSpace(m.Content)
	if len(c) > 0 && c[0] == '"' {
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return nil, err
		}
		return []Block{{Type: "text", Text: &s}}, nil
	}
	var bs []Block
	err := json.Unmarshal(c, &bs)
	return bs, err
}

// ResultText is a tool_result block's content as text.
func (b Block) ResultText() string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []Block
	_ = json.Unmarshal(b.Content, &parts)
	var out []string
	for _, p := range parts {
		if p.Text != nil {
			out = append(out, *p.Text)
		}
	}
	return strings.Join(out, "")
}

// Tool is one wire tool definition.
type Tool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Reply is what the server answers to one request.
type Reply struct {
	// Status is the HTTP status. Default: 200.
	Status int
	// Header is added to the response (e.g. Retry-After).
	Header http.Header
	// Body, when set, is sent verbatim.
	Body string
	// ErrorType and Error, for a non-2xx Status without Body, are
	// error.type (default: by status, e.g. overloaded_error for 529) and
	// error.message.
	ErrorType, Error string

	// Content, ToolCalls, StopReason and Usage build a 200 message. A call's
	// Arguments are sent as input verbatim when they are JSON, else as a
	// JSON string. StopReason defaults to "tool_use" with calls, else
	// "end_turn".
	Content    string
	ToolCalls  []loop.ToolCall
	StopReason string
	Usage      loop.Usage

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

// Server is a fake Messages API.
type Server struct {
	// URL is the base URL to configure a client with (no /v1).
	URL string
	// APIKey, when set, must arrive as x-api-key or the request gets 401.
	APIKey string

	fake *modeltest.Server[Request, Reply]
}

// NewServer starts a server answering with h, closed when the test ends.
func NewServer(tb testing.TB, h Handler) *Server {
	tb.Helper()
	s := &Server{}
	s.fake = modeltest.Start(tb, s.serve, h, Reply{Content: "ok"})
	s.URL = s.fake.URL()
	return s
}

// Close stops the server, releasing hanging replies. It is idempotent.
func (s *Server) Close() { s.fake.Close() }

// Requests returns every request received so far.
func (s *Server) Requests() []*Request { return s.fake.Requests() }

// Rejected returns the error messages of the requests refused for breaking
// the API's rules.
func (s *Server) Rejected() []string { return s.fake.Rejected() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		writeError(w, http.StatusNotFound, "not_found_error", "Not Found")
		return
	}
	body, ok := modeltest.ReadBody(r)
	if !ok {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
		return
	}
	req := &Request{Header: r.Header.Clone(), Body: body}
	decErr := json.Unmarshal(body, req)
	s.fake.Add(req)
	if s.APIKey != "" && r.Header.Get("X-Api-Key") != s.APIKey {
		// The message quotes the header in full, so that a client leaking
		// error messages is caught.
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key: "+r.Header.Get("X-Api-Key"))
		return
	}
	if r.Header.Get("Anthropic-Version") == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	if decErr != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "There was an error parsing the body of your request: "+decErr.Error())
		return
	}
	if msg := Check(req); msg != "" {
		s.fake.Reject(msg)
		writeError(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	_, rep := s.fake.Answer(req)
	s.write(w, r, rep)
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, rep Reply) {
	status, done := s.fake.Write(w, r, modeltest.Reply{Status: rep.Status, Header: rep.Header, Body: rep.Body,
		Hang: rep.Hang, Drop: rep.Drop})
	if done {
		return
	}
	if status >= 300 {
		typ := rep.ErrorType
		if typ == "" {
			typ = errorType(status)
		}
		writeError(w, status, typ, rep.Error)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_test")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(MessageObject(rep))
}

func errorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status == 529:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

// MessageObject builds the message object a 200 reply carries.
func MessageObject(rep Reply) map[string]any {
	content := []map[string]any{}
	if rep.Content != "" {
		content = append(content, map[string]any{"type": "text", "text": rep.Content, "citations": nil})
	}
	for _, tc := range rep.ToolCalls {
		var input any = json.RawMessage(tc.Function.Arguments)
		if !json.Valid([]byte(tc.Function.Arguments)) {
			input = tc.Function.Arguments
		}
		content = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": input})
	}
	stop := rep.StopReason
	if stop == "" {
		stop = "end_turn"
		if len(rep.ToolCalls) > 0 {
			stop = "tool_use"
		}
	}
	return map[string]any{
		"id": "msg_test", "type": "message", "role": "assistant", "model": "claude-test",
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens": rep.Usage.PromptTokens, "output_tokens": rep.Usage.CompletionTokens,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
	}
}

// Check applies the API's request rules to req and returns the message the
// API would answer 400 with, or "" when req passes.
func Check(req *Request) string {
	switch {
	case req.Model == "":
		return "model: Field required"
	case req.MaxTokens == nil:
		return "max_tokens: Field required"
	case *req.MaxTokens < 1:
		return "max_tokens: Input should be greater than or equal to 1"
	case len(req.Messages) == 0:
		return "messages: at least one message is required"
	}
	for i, t := range req.Tools {
		if msg := checkTool(i, t); msg != "" {
			return msg
		}
	}
	seen := map[string]bool{} // tool_use ids of the transcript
	var open []string         // tool_use ids of the previous assistant message
	usesTools := false
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		blocks, err := m.Blocks()
		if err != nil {
			return fmt.Sprintf("messages.%d.content: Input should be a valid list", i)
		}
		if len(blocks) == 0 && m.Role == "user" {
			return fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		answered := map[string]bool{}
		sawOther := false
		var uses []string
		for j, b := range blocks {
			at := fmt.Sprintf("messages.%d.content.%d", i, j)
			switch b.Type {
			case "text":
				switch {
				case b.Text == nil:
					return at + ".text.text: Field required"
				case *b.Text == "":
					return at + ".text.text: text content blocks must be non-empty"
				case strings.TrimSpace(*b.Text) == "":
					return at + ".text.text: text content blocks must contain non-whitespace text"
				}
				sawOther = true
			case "tool_use":
				usesTools = true
				if m.Role != "assistant" {
					return at + ": tool_use blocks can only appear in assistant messages"
				}
				if !toolIDPattern.MatchString(b.ID) {
					return at + ".tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
				}
				if !toolNamePattern.MatchString(b.Name) {
					return at + ".tool_use.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"
				}
				if in := bytes.TrimSpace(b.Input); len(in) == 0 || in[0] != '{' {
					return at + ".tool_use.input: Input should be a valid dictionary"
				}
				if seen[b.ID] {
					return at + ": `tool_use` ids must be unique"
				}
				seen[b.ID] = true
				uses = append(uses, b.ID)
			case "tool_result":
				usesTools = true
				if m.Role != "user" {
					return at + ": tool_result blocks can only appear in user messages"
				}
				if !contains(open, b.ToolUseID) || answered[b.ToolUseID] {
					return fmt.Sprintf("messages.%d.content.%d: ", i, j) + UnexpectedToolResult + b.ToolUseID + UnexpectedToolResultTail
				}
				if sawOther {
					return fmt.Sprintf("messages.%d: `tool_result` blocks must come first in the content of a user message, before any other content", i)
				}
				answered[b.ToolUseID] = true
			default:
				return at + ".type: Input tag '" + b.Type + "' found using 'type' does not match any of the expected tags"
			}
		}
		if len(open) > 0 {
			var missing []string
			for _, id := range open {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if m.Role != "user" || len(missing) > 0 {
				if m.Role != "user" {
					missing = open
				}
				return fmt.Sprintf("messages.%d: ", i-1) + OrphanToolUse + strings.Join(missing, ", ") + OrphanToolUseTail
			}
		}
		open = uses
	}
	if len(open) > 0 {
		return fmt.Sprintf("messages.%d: ", len(req.Messages)-1) + OrphanToolUse + strings.Join(open, ", ") + OrphanToolUseTail
	}
	if usesTools && len(req.Tools) == 0 {
		return "Requests which include `tool_use` or `tool_result` blocks must define tools."
	}
	return ""
}

func checkTool(i int, t Tool) string {
	at := fmt.Sprintf("tools.%d.custom", i)
	if !toolNamePattern.MatchString(t.Name) {
		return at + ".name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema == nil {
		return at + ".input_schema: Input should be a valid dictionary"
	}
	if string(schema["type"]) != `"object"` {
		return at + ".input_schema.type: Input should be 'object'"
	}
	for _, k := range []string{"oneOf", "anyOf", "allOf"} {
		if _, ok := schema[k]; ok {
			return at + ".input_schema: input_schema does not support oneOf, allOf, or anyOf at the top level"
		}
	}
	return ""
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": "req_test",
	})
}
