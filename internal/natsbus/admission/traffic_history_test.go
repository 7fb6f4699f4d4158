package admission_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestTrafficHistoryKeepsTheNewest: a tool's few records among many of
// another tool's — the history with a limit is that tool's newest records,
// oldest first, and every tool's newest for no tool named; a tool with no
// record has none.
func TestTrafficHistoryKeepsTheNewest(t *testing.T) {
	f := bustest.NewFleet(t)
	record := func(tool protocol.ToolName, reason string) {
		t.Helper()
		subj, err := f.Subjects.TrafficNote(tool)
		if err != nil {
			t.Fatal(err)
		}
		data, err := protocol.EncodeTrafficNote(&protocol.TrafficNote{V: protocol.Version, Tool: tool, Action: protocol.TrafficResume, By: "ann", Reason: reason, At: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.JS.Publish(bustest.Ctx(t), subj, data, jetstream.WithExpectStream(f.Subjects.TrafficStream())); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		record("rare", fmt.Sprintf("rare %d", i))
		for j := range 40 {
			record("busy", fmt.Sprintf("busy %d.%d", i, j))
		}
	}
	traffic := admission.NewToolTraffic(f.JS, f.Subjects)
	reasons := func(tool protocol.ToolName, limit int) []string {
		t.Helper()
		hist, err := traffic.History(bustest.Ctx(t), tool, limit)
		if err != nil {
			t.Fatalf("History(%q, %d): %v", tool, limit, err)
		}
		var out []string
		for _, r := range hist {
			out = append(out, r.Note.Reason)
		}
		return out
	}
	if got := fmt.Sprint(reasons("rare", 3)); got != "[rare 2 rare 3 rare 4]" {
		t.Errorf("rare's newest 3: %s", got)
	}
	if got := fmt.Sprint(reasons("rare", 10)); got != "[rare 0 rare 1 rare 2 rare 3 rare 4]" {
		t.Errorf("rare's newest 10 (it has 5): %s", got)
	}
	if got := fmt.Sprint(reasons("", 2)); got != "[busy 4.38 busy 4.39]" {
		t.Errorf("every tool's newest 2: %s", got)
	}
	if got := len(reasons("busy", 0)); got != 200 {
		t.Errorf("busy's whole history: %d records, want 200", got)
	}
	if got := reasons("idle", 5); len(got) != 0 {
		t.Errorf("a tool with no record: %v", got)
	}
}
