package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ErrAnthropic wraps every [DecodeAnthropic] error.
var ErrAnthropic = errors.New("anthropic: not a usable Messages transcript")

// MaxAnthropicMessages bounds the messages DecodeAnthropic accepts.
const MaxAnthropicMessages = 10000

type anthropicTranscript struct {
	System   json.RawMessage    `json:"system"`
	Messages []anthropicMessage `json:"messages"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// DecodeAnthropic converts a transcript in the Messages API's own format —
// an array of messages, or an object with "system" and "messages" as a
// request carries them — into the loop's neutral transcript: tool_use
// blocks become tool calls (input kept as its JSON text), each tool_result
// a tool message (is_error: a failed outcome), text blocks the message's
// content, system its first message. Thinking blocks are dropped; any other
// block (images, documents, server tools) is refused. The result is for
// [loop.Runner.RunMessages], which answers calls left open. Errors never
// quote the transcript's content.
func DecodeAnthropic(data []byte) ([]loop.Message, error) {
	data = bytes.TrimSpace(data)
	var t anthropicTranscript
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &t.Messages); err != nil {
			return nil, fmt.Errorf("%w: not a JSON array of messages", ErrAnthropic)
		}
	} else if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object with messages", ErrAnthropic)
	}
	if len(t.Messages) == 0 {
		return nil, fmt.Errorf("%w: no messages", ErrAnthropic)
	}
	if len(t.Messages) > MaxAnthropicMessages {
		return nil, fmt.Errorf("%w: more than %d messages", ErrAnthropic, MaxAnthropicMessages)
	}
	var out []loop.Message
	if sys, err := anthropicText(t.System); err != nil {
		return nil, fmt.Errorf("%w: system: %v", ErrAnthropic, err)
	} else if sys != "" {
		out = append(out, loop.Message{Role: "system", Content: sys})
	}
	for i, m := range t.Messages {
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return nil, fmt.Errorf("%w: messages.%d.content: %v", ErrAnthropic, i, err)
		}
		switch m.Role {
		case "user":
			var text []string
			for j, b := range blocks {
				switch b.Type {
				case "text":
					text = append(text, b.Text)
				case "tool_result":
					content, err := anthropicText(b.Content)
					if err != nil {
						return nil, fmt.Errorf("%w: messages.%d.content.%d: %v", ErrAnthropic, i, j, err)
					}
					tm := loop.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: content, Outcome: protocol.OutcomeOK}
					if b.IsError {
						tm.Outcome = protocol.OutcomeFailed
					}
					out = append(out, tm)
				default:
					return nil, fmt.Errorf("%w: messages.%d.content.%d: block type %s is not supported", ErrAnthropic, i, j, clipType(b.Type))
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
					return nil, fmt.Errorf("%w: messages.%d.content.%d: block type %s is not supported", ErrAnthropic, i, j, clipType(b.Type))
				}
			}
			am.Content = strings.Join(text, "")
			out = append(out, am)
		default:
			return nil, fmt.Errorf("%w: messages.%d: role must be user or assistant", ErrAnthropic, i)
		}
	}
	return out, nil
}

// anthropicBlocks reads content: a string (one text block) or an array of blocks.
func anthropicBlocks(raw json.RawMessage) ([]anthropicBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errors.New("not a string")
		}
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var bs []anthropicBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errors.New("must be a string or an array of content blocks")
	}
	return bs, nil
}

// anthropicText reads a string or an array of text blocks (system, tool_result
// content); null or absent is "".
func anthropicText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	bs, err := anthropicBlocks(raw)
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

// blockType is the rule a block type is quoted under in an error: the
// Messages API's rule for names.
var blockType = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// clipType quotes a block type in an error, or says it is invalid.
func clipType(s string) string {
	if !blockType.MatchString(s) {
		return "(invalid)"
	}
	return "'" + s + "'"
}
