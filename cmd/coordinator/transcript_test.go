package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// An attack: the model and a tool write terminal control sequences (an
// OSC 52 clipboard write, cursor movement, a bidi override, C1 controls)
// into the text transcript an operator reads. None reaches the terminal.
func TestTranscriptEscapesTerminalControls(t *testing.T) {
	const evil = "\x1b]52;c;ZXZpbA==\x07\x1b[1A\x1b[2K\u202etxt.exe\u009b2J\x00"
	res := &loop.Result{
		RunID: "run1", Answer: "final" + evil, TerminationReason: loop.TerminationNatural,
		Messages: []loop.Message{
			{Role: "user", Content: "hi"},
			{Role: "assistant", Content: "thinking" + evil, ToolCalls: []loop.ToolCall{
				{ID: "c1" + evil, Type: "function", Function: loop.FunctionCall{Name: "echo" + evil, Arguments: `{"text":"` + evil + `"}`}},
			}},
			{Role: "tool", ToolCallID: "c1" + evil, Content: "line one\nline two" + evil},
		},
		Calls: []loop.CallRecord{{CallID: "c1" + evil, Tool: "echo" + evil, Outcome: "ok", Worker: "w" + evil}},
	}
	var b bytes.Buffer
	if err := writeTranscript(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, r := range out {
		if r != '\n' && r != '\t' && (!unicode.IsPrint(r) || unicode.Is(unicode.Cf, r)) {
			t.Fatalf("the transcript holds %U:\n%q", r, out)
		}
	}
	for _, want := range []string{"thinking", "line one\n", "line two", "final", "echo"} {
		if !strings.Contains(out, want) {
			t.Errorf("transcript lacks %q:\n%s", want, out)
		}
	}
}
