package agenttest

import (
	"context"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

type WordsIn struct {
	Text string `json:"text" jsonschema:"the text to count the words of"`
}

func TestAgentCountsWords(t *testing.T) {
	words := tool.Must(tool.New(tool.Config{Name: "count_words", Idempotent: true},
		func(_ context.Context, in WordsIn) (int, error) { return len(strings.Fields(in.Text)), nil }))
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{words}})
	model, err := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "count_words", "arguments": {"text": "to be or not to be"}}]},
		{"content": "It has {{result \"c1\"}} words."}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := fleet.Runner(runner.Config{Model: model}).Run(t.Context(), "How many words?")
	if err != nil || res.Answer != "It has 6 words." {
		t.Fatalf("Answer = %q (%v), want %q", res.Answer, err, "It has 6 words.")
	}
}
