package termui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/termui"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestPlainLines(t *testing.T) {
	var out testsync.Buffer
	d := termui.New(&out, termui.Config{})
	o := d.Observer()
	ev := loop.CallEvent{Run: "r1", CallID: "c1", CallKey: "k1", Tool: "calculator"}
	for _, ph := range []loop.CallPhase{loop.CallAwaitingApproval, loop.CallQueued, loop.CallStartedPhase, loop.CallDone} {
		ev.Phase = ph
		if ph == loop.CallStartedPhase {
			ev.Worker = "w1"
		}
		if ph == loop.CallDone {
			ev.Outcome, ev.Duration = protocol.OutcomeOK, 12*time.Millisecond
		}
		o.CallEvent(ev)
	}
	o.CallEvent(ev) // a late duplicate prints nothing
	d.Close()
	d.Close()
	want := "  ? calculator c1: waiting for approval: coordinator approvals approve r1 k1\n" +
		"  … calculator c1: queued\n" +
		"  ▸ calculator c1: started on worker w1\n" +
		"  ✓ calculator c1: ok in 12 ms on w1\n"
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestHostileText shows that nothing a model, a tool or a worker names
// reaches the terminal as a control sequence.
func TestHostileText(t *testing.T) {
	var out testsync.Buffer
	d := termui.New(&out, termui.Config{Live: true})
	evil := "\x1b]52;c;aGk=\x07\x1b[2J\u202e"
	d.Update(termui.Event{Run: "r", CallID: evil, CallKey: "k", Tool: evil, Phase: loop.CallStartedPhase, Worker: evil})
	d.Update(termui.Event{CallKey: "k", Progress: evil + strings.Repeat("x", 10000)})
	d.Update(termui.Event{CallKey: "k", Phase: loop.CallDone, Outcome: protocol.OutcomeFailed, Worker: evil})
	d.Close()
	got := out.String()
	// The display's own sequences: cursor up and clear below.
	clean := strings.NewReplacer("\x1b[1F\x1b[J", "").Replace(got)
	if strings.ContainsAny(clean, "\x1b\x07\u202e") {
		t.Errorf("a control sequence reached the terminal: %q", got)
	}
	if len(got) > 4000 {
		t.Errorf("%d bytes printed for one call", len(got))
	}
	if !strings.Contains(got, "✗") {
		t.Errorf("no failed line: %q", got)
	}
}

func TestBounds(t *testing.T) {
	var out testsync.Buffer
	d := termui.New(&out, termui.Config{Live: true})
	defer d.Close()
	for i := range termui.MaxCalls + 10 {
		d.Update(termui.Event{Run: "r", CallID: "c", CallKey: protocol.CallKey("k" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)), Tool: "t", Phase: loop.CallQueued})
	}
	before := len(out.String())
	d.Update(termui.Event{CallKey: "ka", Progress: "half way"})
	redraw := out.String()[before:]
	if n := strings.Count(redraw, "\n"); n > termui.MaxLive+1 {
		t.Errorf("a redraw of %d lines", n)
	}
	if !strings.Contains(redraw, "more calls in flight") || !strings.Contains(redraw, "half way") {
		t.Errorf("redraw: %q", redraw)
	}
}

// TestProgressStartsALine: a waiter that sees only progress reports
// (submit --wait) gets a status line for the call.
func TestProgressStartsALine(t *testing.T) {
	var out testsync.Buffer
	d := termui.New(&out, termui.Config{})
	d.Progress(protocol.Progress{RunID: "r", CallKey: "k", CallID: "c1", Tool: "slow", Worker: "w1", Seq: 1, Message: "10%"})
	d.Progress(protocol.Progress{RunID: "r", CallKey: "k", Seq: 2, Message: "20%"})
	d.Update(termui.Event{CallKey: "k", Phase: loop.CallDone, Outcome: protocol.OutcomeOK, Duration: time.Second})
	d.Close()
	want := "  ▸ slow c1: started on worker w1 — 10%\n  ✓ slow c1: ok in 1000 ms on w1\n"
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
