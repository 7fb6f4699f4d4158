package anthropic

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ToolNamePattern is the Messages API's rule for tool names.
var ToolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// PlaceholderTool is the tool offered, with tool_choice none, when a
// transcript holds tool calls but no tool is on offer.
const PlaceholderTool = "no_tools_available"

func usesTools(msgs []loop.Message) bool {
	for _, m := range msgs {
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// skippedTool is a tool left out of a request, and why.
type skippedTool struct{ name, reason string }

// buildParams maps a loop.Request onto Messages parameters:
//
//   - system messages become the system prompt, in order;
//   - an assistant message becomes text and tool_use blocks, in order;
//   - the tool messages after it become one user message of tool_result
//     blocks, in request order, with is_error set for every outcome but ok;
//     a user message right after them joins that message, after the
//     results;
//   - consecutive messages of one role are merged, empty text is dropped.
func (m *Model) buildParams(req loop.Request) (sdk.MessageNewParams, []skippedTool, error) {
	p := sdk.MessageNewParams{Model: sdk.Model(m.cfg.Model), MaxTokens: int64(m.cfg.MaxTokens)}
	sys, msgs, err := ToMessages(req.Messages)
	if err != nil {
		return p, nil, err
	}
	for _, s := range sys {
		p.System = append(p.System, sdk.TextBlockParam{Text: s})
	}
	p.Messages = msgs
	var skipped []skippedTool
	for _, t := range req.Tools {
		tp, reason := toolParam(t)
		if reason != "" {
			skipped = append(skipped, skippedTool{t.Name, reason})
			continue
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tp})
	}
	if len(p.Tools) == 0 && usesTools(req.Messages) {
		// The API refuses tool_use and tool_result blocks in a request that
		// defines no tools (the catalog emptied mid-run, or every tool was
		// left out): offer a placeholder the model may not call.
		p.Tools = []sdk.ToolUnionParam{{OfTool: &sdk.ToolParam{Name: PlaceholderTool,
			Description: param.NewOpt("No tools are available now."), InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{}}}}}
		p.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
		return p, skipped, nil
	}
	if m.cfg.DisableParallelToolUse && len(p.Tools) > 0 {
		p.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{DisableParallelToolUse: param.NewOpt(true)}}
	}
	return p, skipped, nil
}

// ToMessages converts a neutral transcript into the Messages API's system
// prompt and messages.
func ToMessages(in []loop.Message) (system []string, out []sdk.MessageParam, err error) {
	var role string // of the message being built
	var blocks []sdk.ContentBlockParamUnion
	flush := func() {
		if len(blocks) > 0 {
			if role == "assistant" {
				out = append(out, sdk.NewAssistantMessage(blocks...))
			} else {
				out = append(out, sdk.NewUserMessage(blocks...))
			}
		}
		blocks = nil
	}
	add := func(r string, b ...sdk.ContentBlockParamUnion) {
		if r != role {
			flush()
			role = r
		}
		blocks = append(blocks, b...)
	}
	for i, msg := range in {
		switch msg.Role {
		case "system", "developer":
			if strings.TrimSpace(msg.Content) != "" {
				system = append(system, msg.Content)
			}
		case "user":
			if strings.TrimSpace(msg.Content) != "" {
				add("user", sdk.NewTextBlock(msg.Content))
			}
		case "tool":
			b := sdk.ToolResultBlockParam{ToolUseID: wireID(msg.ToolCallID)}
			if msg.Content != "" {
				b.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: msg.Content}}}
			}
			if msg.Outcome != "" && msg.Outcome != protocol.OutcomeOK {
				b.IsError = param.NewOpt(true)
			}
			add("user", sdk.ContentBlockParamUnion{OfToolResult: &b})
		case "assistant":
			var bs []sdk.ContentBlockParamUnion
			if strings.TrimSpace(msg.Content) != "" {
				bs = append(bs, sdk.NewTextBlock(msg.Content))
			}
			for _, tc := range msg.ToolCalls {
				bs = append(bs, sdk.NewToolUseBlock(wireID(tc.ID), inputObject(tc.Function.Arguments), wireName(tc.Function.Name)))
			}
			if len(bs) > 0 {
				add("assistant", bs...)
			}
		default:
			return nil, nil, fmt.Errorf("%w: messages[%d]: unknown role %.32q", modelhttp.ErrInvalidRequest, i, msg.Role)
		}
	}
	flush()
	return system, out, nil
}

// toolIDPattern is the Messages API's rule for tool_use ids.
var toolIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// wireID is the id a tool_use and its tool_result carry: the transcript's
// own when the API takes it, else a stable stand-in derived from it (an
// imported transcript or a compatible server may use other characters),
// so that both sides of the pair still match.
func wireID(id string) string {
	if toolIDPattern.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "toolu_x" + hex.EncodeToString(sum[:12])
}

// wireName is a tool_use's name as the API takes it: a name outside the
// pattern (a call the loop answered unknown_tool) is sent as
// "invalid_tool_name".
func wireName(name string) string {
	if ToolNamePattern.MatchString(name) {
		return name
	}
	return "invalid_tool_name"
}

// inputObject is the arguments as the JSON object a tool_use block must
// carry: the model's text when it is one, else {} (the loop has answered
// such a call invalid_arguments).
func inputObject(args string) json.RawMessage {
	b := bytes.TrimSpace([]byte(args))
	if len(b) > 0 && b[0] == '{' && json.Valid(b) {
		return json.RawMessage(b)
	}
	return json.RawMessage(`{}`)
}

// toolParam maps a tool definition, or says why the API would refuse it.
func toolParam(t loop.ToolDef) (*sdk.ToolParam, string) {
	if !ToolNamePattern.MatchString(t.Name) {
		return nil, "invalid_name"
	}
	var obj map[string]json.RawMessage
	if len(t.Parameters) == 0 {
		obj = map[string]json.RawMessage{"type": json.RawMessage(`"object"`)}
	} else if err := json.Unmarshal(t.Parameters, &obj); err != nil || obj == nil {
		return nil, "schema_not_an_object"
	}
	if typ, ok := obj["type"]; !ok || string(bytes.TrimSpace(typ)) != `"object"` {
		return nil, "schema_type_not_object"
	}
	for _, k := range []string{"oneOf", "anyOf", "allOf"} {
		if _, ok := obj[k]; ok {
			return nil, "schema_top_level_" + k
		}
	}
	schema := sdk.ToolInputSchemaParam{ExtraFields: map[string]any{}}
	for k, v := range obj {
		switch k {
		case "type":
		case "properties":
			schema.Properties = v
		case "required":
			if err := json.Unmarshal(v, &schema.Required); err != nil {
				return nil, "schema_required_not_strings"
			}
		default:
			schema.ExtraFields[k] = v
		}
	}
	tp := &sdk.ToolParam{Name: t.Name, InputSchema: schema}
	if t.Description != "" {
		tp.Description = param.NewOpt(t.Description)
	}
	return tp, ""
}

// toResponse maps a Message onto a loop.Response. Every tool_use block is
// kept, in order, with its id and input exactly as sent.
//
// stop_reason: end_turn and stop_sequence are "stop", tool_use is
// "tool_calls", refusal is "content_filter", max_tokens and
// model_context_window_exceeded are "length" — unless the answer holds a
// tool_use block, which may then be cut off: that is an [ErrBadResponse]
// the run reports. pause_turn (only for server tools, which are never
// offered) is one too.
func toResponse(msg *sdk.Message) (*loop.Response, error) {
	if msg == nil {
		return nil, fmt.Errorf("%w: no message", modelhttp.ErrBadResponse)
	}
	out := loop.Message{Role: "assistant"}
	var text []string
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			args := string(bytes.TrimSpace(b.Input))
			if args == "" || args == "null" {
				args = "{}"
			}
			out.ToolCalls = append(out.ToolCalls, loop.ToolCall{ID: b.ID, Type: "function",
				Function: loop.FunctionCall{Name: b.Name, Arguments: args}})
		}
	}
	out.Content = strings.Join(text, "")
	finish := "stop"
	switch msg.StopReason {
	case sdk.StopReasonToolUse:
		finish = "tool_calls"
	case sdk.StopReasonRefusal:
		finish = "content_filter"
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		if len(out.ToolCalls) > 0 {
			return nil, fmt.Errorf("%w: stop_reason %s in the middle of a tool call", modelhttp.ErrBadResponse, msg.StopReason)
		}
		finish = "length"
	case sdk.StopReasonPauseTurn:
		return nil, fmt.Errorf("%w: stop_reason pause_turn (server tools are not offered)", modelhttp.ErrBadResponse)
	default:
		if len(out.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	u := msg.Usage
	return &loop.Response{
		Message:      out,
		FinishReason: finish,
		Usage: loop.Usage{
			PromptTokens:     int(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens),
			CompletionTokens: int(u.OutputTokens),
		},
	}, nil
}
