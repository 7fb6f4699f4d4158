package loop

import (
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// CallPhase is where one call stands. The vocabulary is fixed and
// append-only.
type CallPhase string

// The phases of a call, in the order they usually come; a call may skip
// any but the last.
const (
	// CallAwaitingApproval: the gate asked a human; the call waits.
	CallAwaitingApproval CallPhase = "awaiting_approval"
	// CallQueued: the call is being published to the fleet.
	CallQueued CallPhase = "queued"
	// CallStartedPhase: a worker said it started the call.
	CallStartedPhase CallPhase = "started"
	// CallDone: the call is answered; Outcome says how.
	CallDone CallPhase = "done"
)

// CallEvent is one step of one call, for a display of calls in flight.
type CallEvent struct {
	Run   protocol.RunID
	Round int
	// CallID is the id in the transcript: the model's text, clipped; print
	// it through internal/termsafe.
	CallID  string
	CallKey protocol.CallKey
	// Tool is the catalog tool's name, or "" when the model named none.
	Tool  string
	Phase CallPhase
	// Worker is the worker that started or answered the call, when known
	// (clipped, untrusted).
	Worker string
	// Outcome and Duration (the coordinator's handling time) are set when
	// Phase is CallDone.
	Outcome  protocol.Outcome
	Duration time.Duration
}

// CallObserver is an [Observer] that also follows each call through its
// phases. The loop calls CallEvent from the run's goroutine, like every
// Observer method: it must be quick and must not block.
type CallObserver interface {
	Observer
	CallEvent(ev CallEvent)
}

func (m multiObserver) CallEvent(ev CallEvent) {
	for _, o := range m {
		if co, ok := o.(CallObserver); ok {
			co.CallEvent(ev)
		}
	}
}

// callEvent tells the run's Observer, when it follows calls, that s is in
// phase.
func (ru *run) callEvent(round int, s *callState, phase CallPhase) {
	co, ok := ru.cfg.Observer.(CallObserver)
	if !ok {
		return
	}
	ev := CallEvent{Run: ru.id, Round: round, CallID: clipName(s.id), CallKey: s.key, Phase: phase, Worker: s.worker}
	if s.entry != nil {
		ev.Tool = string(s.entry.spec.Name)
	}
	if phase == CallDone {
		ev.Outcome, ev.Duration = s.outcome, s.end.Sub(s.start)
	}
	co.CallEvent(ev)
}
