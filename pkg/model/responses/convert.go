package responses

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/openai/openai-go/v3/packages/param"
	sdk "github.com/openai/openai-go/v3/responses"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

// ToInput converts a neutral transcript into Responses input items: a
// message per system, user and assistant text; a function_call item per
// tool call; a function_call_output item per tool message.
func ToInput(msgs []loop.Message) (sdk.ResponseInputParam, error) {
	items := make(sdk.ResponseInputParam, 0, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user":
			items = append(items, sdk.ResponseInputItemParamOfMessage(m.Content, sdk.EasyInputMessageRole(m.Role)))
		case "assistant":
			if m.Content != "" || len(m.ToolCalls) == 0 {
				items = append(items, sdk.ResponseInputItemParamOfMessage(m.Content, sdk.EasyInputMessageRoleAssistant))
			}
			for _, tc := range m.ToolCalls {
				items = append(items, sdk.ResponseInputItemParamOfFunctionCall(tc.Function.Arguments, tc.ID, tc.Function.Name))
			}
		case "tool":
			it := sdk.ResponseInputItemParamOfFunctionCallOutput(m.Content)
			it.OfFunctionCallOutput.CallID = param.NewOpt(m.ToolCallID)
			items = append(items, it)
		default:
			return nil, fmt.Errorf("%w: messages[%d]: unknown role %.32q", modelhttp.ErrInvalidRequest, i, m.Role)
		}
	}
	return items, nil
}

func toolParam(t loop.ToolDef) (sdk.ToolUnionParam, error) {
	fn := sdk.FunctionToolParam{Name: t.Name, Strict: param.NewOpt(false)}
	if t.Description != "" {
		fn.Description = param.NewOpt(t.Description)
	}
	if len(t.Parameters) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(t.Parameters, &obj); err != nil || obj == nil {
			return sdk.ToolUnionParam{}, fmt.Errorf("parameters: not a JSON object")
		}
		fn.Parameters = make(map[string]any, len(obj))
		for k, v := range obj {
			fn.Parameters[k] = v
		}
	}
	return sdk.ToolUnionParam{OfFunction: &fn}, nil
}

// toResponse maps a Response onto a loop.Response. Every function_call item
// is kept, in order, with its call_id and arguments exactly as sent (a
// custom_tool_call too, so that its id is answered).
//
// status completed is "tool_calls" or "stop"; incomplete for
// max_output_tokens is "length" and for content_filter "content_filter" —
// unless the output holds a function call, which may be cut off: that is an
// [modelhttp.ErrBadResponse] the run reports, as is a failed, cancelled,
// queued or in-progress response.
func toResponse(r *sdk.Response) (*loop.Response, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: no response", modelhttp.ErrBadResponse)
	}
	msg := loop.Message{Role: "assistant"}
	var text, refusal bytes.Buffer
	for _, it := range r.Output {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				switch c.Type {
				case "output_text":
					text.WriteString(c.Text)
				case "refusal":
					refusal.WriteString(c.Refusal)
				}
			}
		case "function_call":
			args := it.Arguments.OfString
			if raw := it.JSON.Arguments.Raw(); args == "" && raw != "" && raw != "null" && raw[0] != '"' {
				args = raw
			}
			msg.ToolCalls = append(msg.ToolCalls, loop.ToolCall{ID: it.CallID, Type: "function",
				Function: loop.FunctionCall{Name: it.Name, Arguments: args}})
		case "custom_tool_call":
			msg.ToolCalls = append(msg.ToolCalls, loop.ToolCall{ID: it.CallID, Type: "function",
				Function: loop.FunctionCall{Name: it.Name, Arguments: it.Input}})
		}
	}
	msg.Content = text.String()
	finish := "stop"
	if msg.Content == "" && refusal.Len() > 0 {
		msg.Content, finish = refusal.String(), "content_filter"
	}
	switch r.Status {
	case sdk.ResponseStatusCompleted, "":
		if len(msg.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	case sdk.ResponseStatusIncomplete:
		reason := modelhttp.SafeIdentifier(r.IncompleteDetails.Reason)
		if len(msg.ToolCalls) > 0 {
			return nil, fmt.Errorf("%w: response incomplete (%s) with a function call", modelhttp.ErrBadResponse, reason)
		}
		finish = "length"
		if reason == "content_filter" {
			finish = "content_filter"
		}
	default:
		return nil, fmt.Errorf("%w: response status %s", modelhttp.ErrBadResponse, modelhttp.SafeIdentifier(string(r.Status)))
	}
	return &loop.Response{
		Message:      msg,
		FinishReason: finish,
		Usage:        loop.Usage{PromptTokens: int(r.Usage.InputTokens), CompletionTokens: int(r.Usage.OutputTokens)},
	}, nil
}
