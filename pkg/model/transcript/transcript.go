// Package transcript reads a transcript in any provider's own format into
// the loop's neutral one: chat-completions messages, Anthropic Messages
// (messages with content blocks, or {"system", "messages"}), or OpenAI
// Responses input items (or {"instructions", "input"}).
package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// Format names a transcript format.
type Format string

// The formats [Decode] reads.
const (
	FormatChat      Format = "chat"
	FormatAnthropic Format = "anthropic"
	FormatResponses Format = "openai-responses"
)

// ErrUnknownFormat is a transcript in none of the formats.
var ErrUnknownFormat = errors.New("transcript: not chat-completions messages, an Anthropic Messages transcript or Responses input items")

// Decode reads data in the first format that takes it: chat-completions
// messages (strictly: no unknown fields), then Anthropic Messages, then
// Responses items. The messages still have to pass
// [loop.Runner.RunMessages]'s check, which also answers calls left open.
// Errors never quote the transcript.
func Decode(data []byte) ([]loop.Message, Format, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var msgs []loop.Message
	if err := dec.Decode(&msgs); err == nil && len(msgs) > 0 && !dec.More() {
		return msgs, FormatChat, nil
	}
	if !looksLikeProvider(data) {
		return nil, "", fmt.Errorf("%w: not strict chat-completions messages, and no content blocks or typed items", ErrUnknownFormat)
	}
	msgs, aerr := DecodeAnthropic(data)
	if aerr == nil {
		return msgs, FormatAnthropic, nil
	}
	msgs, rerr := DecodeResponses(data)
	if rerr == nil {
		return msgs, FormatResponses, nil
	}
	return nil, "", fmt.Errorf("%w (as Anthropic: %v; as Responses: %v)", ErrUnknownFormat, aerr, rerr)
}

// looksLikeProvider reports whether data is recognisably in a provider's
// own format — a request object, a message whose content is an array of
// blocks, or a typed item — so that chat messages with a stray field are
// refused rather than read leniently.
func looksLikeProvider(data []byte) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) == nil {
		_, m := obj["messages"]
		_, i := obj["input"]
		return m || i
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(data, &items) != nil {
		return false
	}
	for _, it := range items {
		if _, ok := it["type"]; ok {
			return true
		}
		if c := bytes.TrimSpace(it["content"]); len(c) > 0 && c[0] == '[' {
			return true
		}
	}
	return false
}
