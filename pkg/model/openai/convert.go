package openai

import (
	"encoding/json"
	"fmt"
	"math"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/shared"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// buildParams maps a loop.Request onto chat-completion parameters. Contents,
// tool call ids and arguments are sent verbatim; arguments that are not valid
// JSON stay as they are (they are a string on the wire).
func (m *Model) buildParams(req loop.Request) (sdk.ChatCompletionNewParams, error) {
	p := sdk.ChatCompletionNewParams{
		Model:    shared.ChatModel(m.cfg.Model),
		Messages: make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)),
	}
	if m.cfg.Temperature != nil {
		p.Temperature = param.NewOpt(*m.cfg.Temperature)
	}
	if m.cfg.MaxTokens > 0 {
		p.MaxCompletionTokens = param.NewOpt(int64(m.cfg.MaxTokens))
	}
	for i, msg := range req.Messages {
		u, err := messageParam(msg)
		if err != nil {
			return p, fmt.Errorf("%w: messages[%d]: %v", ErrInvalidRequest, i, err)
		}
		p.Messages = append(p.Messages, u)
	}
	for i, t := range req.Tools {
		u, err := toolParam(t)
		if err != nil {
			return p, fmt.Errorf("%w: tools[%d]: %v", ErrInvalidRequest, i, err)
		}
		p.Tools = append(p.Tools, u)
	}
	return p, nil
}

func messageParam(msg loop.Message) (sdk.ChatCompletionMessageParamUnion, error) {
	switch msg.Role {
	case "system":
		return sdk.SystemMessage(msg.Content), nil
	case "user":
		return sdk.UserMessage(msg.Content), nil
	case "tool":
		return sdk.ToolMessage(msg.Content, msg.ToolCallID), nil
	case "assistant":
		a := sdk.ChatCompletionAssistantMessageParam{}
		// An assistant message that only calls tools carries no content,
		// as the API itself writes it.
		if msg.Content != "" || len(msg.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(msg.Content)
		}
		for _, tc := range msg.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Function.Name,
						Arguments: tc.Function.Arguments,
					},
				},
			})
		}
		return sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return sdk.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %.32q", msg.Role)
	}
}

func toolParam(t loop.ToolDef) (sdk.ChatCompletionToolUnionParam, error) {
	def := shared.FunctionDefinitionParam{Name: t.Name}
	if t.Description != "" {
		def.Description = param.NewOpt(t.Description)
	}
	if len(t.Parameters) > 0 {
		// Each property keeps its exact JSON text: no float64 round trip
		// for numbers in the schema.
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(t.Parameters, &obj); err != nil || obj == nil {
			return sdk.ChatCompletionToolUnionParam{}, fmt.Errorf("parameters: not a JSON object")
		}
		def.Parameters = make(shared.FunctionParameters, len(obj))
		for k, v := range obj {
			def.Parameters[k] = v
		}
	}
	return sdk.ChatCompletionToolUnionParam{
		OfFunction: &sdk.ChatCompletionFunctionToolParam{Function: def},
	}, nil
}

// toResponse maps the first choice of a completion onto a loop.Response.
// Every tool call the server returned is kept, in order, with its id and
// arguments exactly as sent, so the loop can answer each id.
func toResponse(cc *sdk.ChatCompletion) (*loop.Response, error) {
	if cc == nil || len(cc.Choices) == 0 {
		return nil, fmt.Errorf("%w: no choices", ErrBadResponse)
	}
	ch := cc.Choices[0]
	msg := loop.Message{Role: "assistant", Content: ch.Message.Content}
	if msg.Content == "" && ch.Message.Refusal != "" {
		msg.Content = ch.Message.Refusal
	}
	for _, tc := range ch.Message.ToolCalls {
		call := loop.ToolCall{ID: tc.ID, Type: "function"}
		switch tc.Type {
		case "custom":
			// Only offered when a custom tool is, which this package never
			// does; kept so that its id is answered all the same.
			call.Function = loop.FunctionCall{Name: tc.Custom.Name, Arguments: tc.Custom.Input}
		default:
			call.Function = loop.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}
			// Some compatible servers send arguments as a JSON object
			// instead of a string holding one: keep its text.
			if raw := tc.Function.JSON.Arguments.Raw(); raw != "" && raw != "null" && !tc.Function.JSON.Arguments.Valid() {
				call.Function.Arguments = raw
			}
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	return &loop.Response{
		Message: msg,
		Usage: loop.Usage{
			PromptTokens:     usageTokens(cc.Usage.PromptTokens, cc.Usage.JSON.PromptTokens),
			CompletionTokens: usageTokens(cc.Usage.CompletionTokens, cc.Usage.JSON.CompletionTokens),
		},
		FinishReason: ch.FinishReason,
	}, nil
}

// usageTokens is a usage count for loop.Usage: -1 when the server sent
// something that is not a count (a string, an object, a fraction, a
// number past int64), which the loop then counts as its reserve; a count
// past int's range is clipped to it.
func usageTokens(n int64, f respjson.Field) int {
	if raw := f.Raw(); raw != "" && raw != respjson.Null && !f.Valid() {
		return -1
	}
	if n > int64(math.MaxInt) {
		return math.MaxInt
	}
	return int(n)
}
