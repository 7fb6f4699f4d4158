// Package termui shows the calls of a run as they go, for a person at a
// terminal: one status line per call (queued → started on worker W →
// waiting for approval, with the command that approves it → done in N ms,
// and the latest progress a tool reported), redrawn in place while the call
// is in flight and left on screen once it is done.
//
// Everything it prints passes through internal/termsafe: call ids, tool
// and worker names and progress messages are untrusted text.
//
// "coordinator run" feeds a Display from the loop ([Display.CallEvent], a
// [loop.CallObserver]); any other waiter (submit --wait) feeds it with
// [Display.Update] from what it receives over NATS.
package termui

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Bounds of what a Display keeps and prints.
const (
	// MaxLive bounds the in-flight calls drawn; the rest are summed up in
	// one line.
	MaxLive = 20
	// MaxCalls bounds the calls a Display follows; events for more are
	// ignored.
	MaxCalls = 4096
	// fieldWidth clips every field of a line, in runes.
	fieldWidth = 64
	// progressWidth clips a progress message, in runes.
	progressWidth = 100
)

// Config configures a Display. The zero value prints plain lines.
type Config struct {
	// Live redraws the in-flight calls in place with ANSI cursor
	// movement, and their elapsed time every Tick: for a terminal. False
	// prints one plain line per change.
	Live bool
	// ApproveCommand returns the command that approves a call. Default:
	// "coordinator approvals approve RUN KEY".
	ApproveCommand func(run protocol.RunID, key protocol.CallKey) string
	// Width is the terminal's width in columns: a live display cuts the
	// lines it redraws to it, so that none wraps (a wrapped line would
	// not be erased). 0: 80.
	Width int
	// Tick is how often a live display redraws elapsed times. Default: 1s.
	Tick time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// Event is one change to one call.
type Event struct {
	Run     protocol.RunID
	CallID  string
	CallKey protocol.CallKey
	Tool    string
	// Phase is where the call stands; empty for a progress report, which
	// leaves the phase as it is.
	Phase    loop.CallPhase
	Worker   string
	Outcome  protocol.Outcome
	Duration time.Duration
	// Progress is what the tool reported, if anything.
	Progress string
}

// Display draws the calls of runs on a writer. It is safe for concurrent
// use; Close stops it.
type Display struct {
	cfg Config
	w   io.Writer

	mu     sync.Mutex
	calls  map[protocol.CallKey]*call
	live   []*call // in flight, in the order they appeared
	drawn  int     // lines of the live block on screen
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

type call struct {
	ev       Event
	since    time.Time
	progress string
}

var _ loop.CallObserver = (*Observer)(nil)

// New returns a Display writing to w. A live one starts redrawing elapsed
// times until Close.
func New(w io.Writer, cfg Config) *Display {
	if cfg.ApproveCommand == nil {
		cfg.ApproveCommand = func(run protocol.RunID, key protocol.CallKey) string {
			return fmt.Sprintf("coordinator approvals approve %s %s", run, key)
		}
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Width <= 0 {
		cfg.Width = 80
	}
	d := &Display{cfg: cfg, w: w, calls: map[protocol.CallKey]*call{}, stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.Live {
		go d.ticker()
	} else {
		close(d.done)
	}
	return d
}

// Observer returns a [loop.CallObserver] that feeds d, for loop.Config's
// Observer.
func (d *Display) Observer() *Observer { return &Observer{d: d} }

// Observer feeds a Display from the loop.
type Observer struct {
	loop.NopObserver
	d *Display
}

// CallEvent implements [loop.CallObserver].
func (o *Observer) CallEvent(ev loop.CallEvent) {
	o.d.Update(Event{Run: ev.Run, CallID: ev.CallID, CallKey: ev.CallKey, Tool: ev.Tool, Phase: ev.Phase,
		Worker: ev.Worker, Outcome: ev.Outcome, Duration: ev.Duration})
}

// Progress shows a progress report of a call: on its status line, which
// it starts (as a started call) when the display has not seen the call
// yet. It never blocks for long: it is a [loop.ProgressFunc].
func (d *Display) Progress(p protocol.Progress) {
	d.Update(Event{Run: p.RunID, CallID: string(p.CallID), CallKey: p.CallKey, Tool: string(p.Tool),
		Worker: p.Worker, Progress: p.Message})
}

// Update applies one event and redraws.
func (d *Display) Update(ev Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	c := d.calls[ev.CallKey]
	isNew := c == nil
	if isNew {
		if len(d.calls) >= MaxCalls {
			return
		}
		if ev.Phase == "" {
			ev.Phase = loop.CallStartedPhase // a call that reports progress has started
		}
		c = &call{ev: ev, since: d.cfg.Now()}
		d.calls[ev.CallKey] = c
		d.live = append(d.live, c)
	}
	if c.ev.Phase == loop.CallDone {
		return // late events of an answered call
	}
	if ev.Progress != "" {
		c.progress = ev.Progress
		if ev.Phase == "" {
			d.redraw(nil, false)
			return
		}
	}
	prev := c.ev
	c.ev.Phase = ev.Phase
	if ev.Worker != "" {
		c.ev.Worker = ev.Worker
	}
	if ev.Tool != "" {
		c.ev.Tool = ev.Tool
	}
	if ev.CallID != "" {
		c.ev.CallID = ev.CallID
	}
	if c.ev.Run == "" {
		c.ev.Run = ev.Run
	}
	c.ev.Outcome, c.ev.Duration = ev.Outcome, ev.Duration
	if ev.Phase == loop.CallDone {
		d.redraw(c, true)
		return
	}
	d.redraw(c, isNew || prev.Phase != c.ev.Phase || prev.Worker != c.ev.Worker)
}

// redraw puts the screen in step: a live display erases its block, prints
// the finished call for good and draws the block again; a plain one prints
// the changed call's line when it changed.
func (d *Display) redraw(changed *call, phaseChanged bool) {
	if !d.cfg.Live {
		if changed != nil && phaseChanged {
			fmt.Fprintln(d.w, d.line(changed))
		}
		if changed != nil && changed.ev.Phase == loop.CallDone {
			d.remove(changed)
		}
		return
	}
	var b strings.Builder
	if d.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dF\x1b[J", d.drawn) // to the block's first line, and clear below
	}
	switch {
	case changed != nil && changed.ev.Phase == loop.CallDone:
		b.WriteString(d.line(changed) + "\n")
		d.remove(changed)
	case changed != nil && phaseChanged && changed.ev.Phase == loop.CallAwaitingApproval:
		// The command stays on screen above the block, whole.
		b.WriteString(d.line(changed) + "\n")
	}
	d.drawn = 0
	for i, c := range d.live {
		if i == MaxLive {
			fmt.Fprintf(&b, "  … and %d more calls in flight\n", len(d.live)-MaxLive)
			d.drawn++
			break
		}
		b.WriteString(termsafe.Line(d.liveLine(c), d.cfg.Width-1) + "\n")
		d.drawn++
	}
	io.WriteString(d.w, b.String())
}

func (d *Display) remove(c *call) {
	for i, l := range d.live {
		if l == c {
			d.live = append(d.live[:i], d.live[i+1:]...)
			return
		}
	}
}

// liveLine is a call's line in a live block: the approval command is
// above it, whole.
func (d *Display) liveLine(c *call) string {
	if c.ev.Phase != loop.CallAwaitingApproval {
		return d.line(c)
	}
	s := fmt.Sprintf("  ? %s %s: waiting for approval", field(c.ev.Tool), field(c.ev.CallID))
	if el := d.cfg.Now().Sub(c.since); el >= time.Second {
		s += fmt.Sprintf(" (%s)", el.Truncate(time.Second))
	}
	return s
}

// line is a call's status line.
func (d *Display) line(c *call) string {
	ev := c.ev
	tool := ev.Tool
	if tool == "" {
		tool = "(unknown tool)"
	}
	head := fmt.Sprintf("%s %s", field(tool), field(ev.CallID))
	var mark, status string
	switch ev.Phase {
	case loop.CallAwaitingApproval:
		return fmt.Sprintf("  ? %s: waiting for approval: %s", head, termsafe.Line(d.cfg.ApproveCommand(ev.Run, ev.CallKey), 0))
	case loop.CallQueued:
		mark, status = "…", "queued"
	case loop.CallStartedPhase:
		mark, status = "▸", "started on worker "+field(ev.Worker)
	case loop.CallDone:
		mark = "✓"
		if ev.Outcome != protocol.OutcomeOK {
			mark = "✗"
		}
		status = fmt.Sprintf("%s in %d ms", field(string(ev.Outcome)), ev.Duration.Milliseconds())
		if ev.Worker != "" {
			status += " on " + field(ev.Worker)
		}
		return fmt.Sprintf("  %s %s: %s", mark, head, status)
	default:
		mark, status = "·", field(string(ev.Phase))
	}
	if el := d.cfg.Now().Sub(c.since); d.cfg.Live && el >= time.Second {
		status += fmt.Sprintf(" (%s)", el.Truncate(time.Second))
	}
	if c.progress != "" {
		status += " — " + termsafe.Line(c.progress, progressWidth)
	}
	return fmt.Sprintf("  %s %s: %s", mark, head, status)
}

func field(s string) string { return termsafe.Line(s, fieldWidth) }

func (d *Display) ticker() {
	defer close(d.done)
	t := time.NewTicker(d.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.mu.Lock()
			if len(d.live) > 0 && !d.closed {
				d.redraw(nil, false)
			}
			d.mu.Unlock()
		}
	}
}

// Close stops the display: a live one erases the block of calls still in
// flight (a run that ended answered them all). It is idempotent.
func (d *Display) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	if d.cfg.Live && d.drawn > 0 {
		fmt.Fprintf(d.w, "\x1b[%dF\x1b[J", d.drawn)
		d.drawn = 0
	}
	d.mu.Unlock()
	if d.cfg.Live {
		close(d.stop)
	}
	<-d.done
}
