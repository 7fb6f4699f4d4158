package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// ErrResponses wraps every [DecodeResponses] error.
var ErrResponses = errors.New("openai-responses: not a usable Responses transcript")

// MaxResponsesItems bounds the items DecodeResponses accepts.
const MaxResponsesItems = 20000

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
}

var responsesItemType = regexp.MustCompile(`^[a-z_]{1,40}$`)

// DecodeResponses converts a transcript in the Responses API's own format
// — an array of input items, or an object with "input" (and optionally
// "instructions") as a request carries it — into the loop's neutral
// transcript: message items become messages, consecutive function_call
// items the tool calls of one assistant message, function_call_output
// items tool messages. Reasoning items are dropped; other item types are
// refused. The result is for [loop.Runner.RunMessages], which answers calls
// left open. Errors never quote the transcript's content.
func DecodeResponses(data []byte) ([]loop.Message, error) {
	data = bytes.TrimSpace(data)
	var req struct {
		Instructions string          `json:"instructions"`
		Input        []responsesItem `json:"input"`
	}
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &req.Input); err != nil {
			return nil, fmt.Errorf("%w: not a JSON array of items", ErrResponses)
		}
	} else if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object with input", ErrResponses)
	}
	if len(req.Input) == 0 {
		return nil, fmt.Errorf("%w: no items", ErrResponses)
	}
	if len(req.Input) > MaxResponsesItems {
		return nil, fmt.Errorf("%w: more than %d items", ErrResponses, MaxResponsesItems)
	}
	var out []loop.Message
	if req.Instructions != "" {
		out = append(out, loop.Message{Role: "system", Content: req.Instructions})
	}
	// open is the index in out of the assistant message that collects the
	// function calls that follow it, or -1.
	open := -1
	for i, it := range req.Input {
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			text, err := responsesText(it.Content)
			if err != nil {
				return nil, fmt.Errorf("%w: input[%d].content: %v", ErrResponses, i, err)
			}
			switch it.Role {
			case "user", "system", "developer":
				role := it.Role
				if role == "developer" {
					role = "system"
				}
				out = append(out, loop.Message{Role: role, Content: text})
				open = -1
			case "assistant":
				out = append(out, loop.Message{Role: "assistant", Content: text})
				open = len(out) - 1
			default:
				return nil, fmt.Errorf("%w: input[%d].role must be user, assistant, system or developer", ErrResponses, i)
			}
		case "function_call", "custom_tool_call":
			if open < 0 {
				out = append(out, loop.Message{Role: "assistant"})
				open = len(out) - 1
			}
			args := it.Input
			if typ == "function_call" {
				var s string
				if err := json.Unmarshal(it.Arguments, &s); err == nil {
					args = s
				} else {
					args = string(it.Arguments)
				}
			}
			out[open].ToolCalls = append(out[open].ToolCalls, loop.ToolCall{ID: it.CallID, Type: "function",
				Function: loop.FunctionCall{Name: it.Name, Arguments: args}})
		case "function_call_output", "custom_tool_call_output":
			text, err := responsesText(it.Output)
			if err != nil {
				return nil, fmt.Errorf("%w: input[%d].output: %v", ErrResponses, i, err)
			}
			out = append(out, loop.Message{Role: "tool", ToolCallID: it.CallID, Content: text})
			open = -1
		case "reasoning":
		default:
			t := "(invalid)"
			if responsesItemType.MatchString(typ) {
				t = "'" + typ + "'"
			}
			return nil, fmt.Errorf("%w: input[%d]: item type %s is not supported", ErrResponses, i, t)
		}
	}
	return out, nil
}

// responsesText reads a string or an array of text parts (input_text,
// output_text, text); null is "".
func responsesText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errors.New("not a string")
		}
		return s, nil
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of text parts")
	}
	var text []string
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			text = append(text, p.Text)
		case "refusal":
			text = append(text, p.Refusal)
		default:
			return "", errors.New("only text parts are supported")
		}
	}
	return strings.Join(text, ""), nil
}
