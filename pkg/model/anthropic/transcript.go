package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ErrTranscript wraps every [DecodeTranscript] error.
var ErrTranscript = errors.New("anthropic: not a usable Messages transcript")

// MaxTranscriptMessages bounds the messages DecodeTranscript accepts.
const MaxTranscriptMessages = 10000

type wireTranscript struct {
	System   json.RawMessage `json:"system"`
	Messages []wireMessage   `json:"messages"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// DecodeTranscript converts a transcript in the Messages API's own format —
// an array of messages, or an object with "system" and "messages" as a
// request carries them — into the loop's neutral transcript: tool_use
// blocks become tool calls (input kept as its JSON text), each tool_result
// a tool message (is_error: a failed outcome), text blocks the message's
// content, system its first message. Thinking blocks are dropped; any other
// block (images, documents, server tools) is refused. The result is for
// [loop.Runner.RunMessages], which answers calls left open. Errors never
// quote the transcript's content.
func DecodeTranscript(data []byte) ([]loop.Message, error) {
	data = bytes.TrimSpace(data)
	var t wireTranscript
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &t.Messages); err != nil {
			return nil, fmt.Errorf("%w: not a JSON array of messages", ErrTranscript)
		}
	} else if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object with messages", ErrTranscript)
	}
	if len(t.Messages) == 0 {
		return nil, fmt.Errorf("%w: no messages", ErrTranscript)
	}
	if len(t.Messages) > MaxTranscriptMessages {
		return nil, fmt.Errorf("%w: more than %d messages", ErrTranscript, MaxTranscriptMessages)
	}
	var out []loop.Message
	if sys, err := textOf(t.System); err != nil {
		return nil, fmt.Errorf("%w: system: %v", ErrTranscript, err)
	} else if sys != "" {
		out = append(out, loop.Message{Role: "system", Content: sys})
	}
	for i, m := range t.Messages {
		blocks, err := blocksOf(m.Content)
		if err != nil {
			return nil, fmt.Errorf("%w: messages.%d.content: %v", ErrTranscript, i, err)
		}
		switch m.Role {
		case "user":
			var text []string
			for j, b := range blocks {
				switch b.Type {
				case "text":
					text = append(text, b.Text)
				case "tool_result":
					content, err := textOf(b.Content)
					if err != nil {
						return nil, fmt.Errorf("%w: messages.%d.content.%d: %v", ErrTranscript, i, j, err)
					}
					tm := loop.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: content, Outcome: protocol.OutcomeOK}
					if b.IsError {
						tm.Outcome = protocol.OutcomeFailed
					}
					out = append(out, tm)
				default:
					return nil, fmt.Errorf("%w: messages.%d.content.%d: block type %s is not supported", ErrTranscript, i, j, clipType(b.Type))
				}
			}
			if len(text) > 0 {
				out = append(out, loop.Message{Role: "user", Content: strings.Join(text, "\n")})
			}
		case "assistant":
			am := loop.Message{Role: "assistant"}
			var text []string
			for j, b := range blocks {
				switch b.Type {
				case "text":
					text = append(text, b.Text)
				case "tool_use":
					args := string(bytes.TrimSpace(b.Input))
					if args == "" || args == "null" {
						args = "{}"
					}
					am.ToolCalls = append(am.ToolCalls, loop.ToolCall{ID: b.ID, Type: "function",
						Function: loop.FunctionCall{Name: b.Name, Arguments: args}})
				case "thinking", "redacted_thinking":
				default:
					return nil, fmt.Errorf("%w: messages.%d.content.%d: block type %s is not supported", ErrTranscript, i, j, clipType(b.Type))
				}
			}
			am.Content = strings.Join(text, "")
			out = append(out, am)
		default:
			return nil, fmt.Errorf("%w: messages.%d: role must be user or assistant", ErrTranscript, i)
		}
	}
	return out, nil
}

// blocksOf reads content: a string (one text block) or an array of blocks.
func blocksOf(raw json.RawMessage) ([]wireBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errors.New("not a string")
		}
		return []wireBlock{{Type: "text", Text: s}}, nil
	}
	var bs []wireBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errors.New("must be a string or an array of content blocks")
	}
	return bs, nil
}

// textOf reads a string or an array of text blocks (system, tool_result
// content); null or absent is "".
func textOf(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	bs, err := blocksOf(raw)
	if err != nil {
		return "", err
	}
	var text []string
	for _, b := range bs {
		if b.Type != "text" {
			return "", fmt.Errorf("block type %s is not supported", clipType(b.Type))
		}
		text = append(text, b.Text)
	}
	return strings.Join(text, "\n"), nil
}

func clipType(s string) string {
	if !ToolNamePattern.MatchString(s) {
		return "(invalid)"
	}
	return "'" + s + "'"
}
