package loop_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// FuzzDecodeInput: the journaled input's decoder takes any bytes without
// panicking; what it accepts is a transcript the loop takes (repaired),
// which encodes and decodes back to itself; what it refuses is ErrNoInput.
func FuzzDecodeInput(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"go"}]}`))
	f.Add([]byte(`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"echo","arguments":"{}"}}]}]}`))
	f.Add([]byte(`{"messages":[],"extra":1}`))
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"x","content":"c"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, err := loop.DecodeInput(data)
		if err != nil {
			if !errors.Is(err, loop.ErrNoInput) {
				t.Fatalf("error %v does not wrap ErrNoInput", err)
			}
			return
		}
		if len(msgs) == 0 {
			t.Fatal("accepted an empty input")
		}
		again, err := loop.DecodeInput(loop.EncodeInput(msgs))
		if err != nil {
			t.Fatalf("re-encoded input refused: %v", err)
		}
		// The JSON form is what is journaled (a tool message's Outcome is
		// not part of it).
		a, _ := json.Marshal(again)
		b, _ := json.Marshal(msgs)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the input:\n%s\n%s", a, b)
		}
	})
}
