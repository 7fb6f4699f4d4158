package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
)

// A model served by a local vLLM (or Ollama, llama.cpp) server; the key may
// stay empty. Against the OpenAI API, leave BaseURL empty and set
// OPENAI_API_KEY.
func Example() {
	m, err := openai.New(openai.Config{
		Model:          "Qwen/Qwen2.5-7B-Instruct",
		BaseURL:        "http://localhost:8000/v1",
		RequestTimeout: 60 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	resp, err := m.Complete(context.Background(), loop.Request{
		Messages: []loop.Message{{Role: "user", Content: "What is (17 + 25) * 3?"}},
		Tools: []loop.ToolDef{{
			Name:        "calculator",
			Description: "Evaluates an arithmetic expression.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}`),
		}},
	})
	if err != nil {
		fmt.Println(err) // e.g. "openai: chat completion failed after 4 attempt(s): openai: HTTP 503 Service Unavailable"
		return
	}
	for _, tc := range resp.Message.ToolCalls {
		fmt.Println(tc.ID, tc.Function.Name, tc.Function.Arguments)
	}
}
