package loop

import (
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Observer receives the loop's measurements, for metrics. The loop calls it
// synchronously from the run's goroutine, so its methods must be quick and
// must not block; they are called concurrently by concurrent runs. A nil
// [Config.Observer] observes nothing.
//
// Implementations should embed [NopObserver], so that methods added later
// have a default.
type Observer interface {
	// RunStarted is called when a run starts, before its first model call.
	RunStarted()
	// RunEnded is called once per started run, with the run's termination
	// reason.
	RunEnded(reason TerminationReason)
	// ModelCall is called after every call of Model.Complete, failed ones
	// included (err non-nil; usage is then zero). d is its wall time.
	ModelCall(d time.Duration, usage Usage, err error)
	// CallEnded is called once per answered tool call id, rejected ones
	// included. tool is the name of a catalog tool, or "" when the model
	// named none (an unknown or invalid name): the model's own text is
	// never passed. d is the coordinator's handling time (0 for calls
	// rejected over the cap).
	CallEnded(tool string, outcome protocol.Outcome, d time.Duration)
	// Approval is called once per valid call that needed approval, with how
	// the gate settled it.
	Approval(result ApprovalResult)
}

// ApprovalResult says how the gate settled one call. The vocabulary is
// fixed and append-only.
type ApprovalResult string

// The approval results.
const (
	// ApprovalApproved: a human approved the call in time; it ran.
	ApprovalApproved ApprovalResult = "approved"
	// ApprovalDenied: a human said no.
	ApprovalDenied ApprovalResult = "denied"
	// ApprovalExpired: no decision arrived in time.
	ApprovalExpired ApprovalResult = "expired"
	// ApprovalUnavailable: there is no gate, or it failed; the call was
	// denied (fail closed).
	ApprovalUnavailable ApprovalResult = "unavailable"
	// ApprovalCancelled: the run ended before a decision.
	ApprovalCancelled ApprovalResult = "cancelled"
)

// NopObserver is an [Observer] that observes nothing. Embed it in an
// Observer that implements only some methods.
type NopObserver struct{}

var _ Observer = NopObserver{}

// RunStarted does nothing.
func (NopObserver) RunStarted() {}

// RunEnded does nothing.
func (NopObserver) RunEnded(TerminationReason) {}

// ModelCall does nothing.
func (NopObserver) ModelCall(time.Duration, Usage, error) {}

// CallEnded does nothing.
func (NopObserver) CallEnded(string, protocol.Outcome, time.Duration) {}

// Approval does nothing.
func (NopObserver) Approval(ApprovalResult) {}

// approvalResult maps how the gate answered a call onto the fixed
// vocabulary of [ApprovalResult].
func approvalResult(c *roundCall) ApprovalResult {
	switch g := c.ans.GateResult; {
	case g == "approved":
		return ApprovalApproved
	case g == "denied":
		return ApprovalDenied
	case g == "expired" || g == "no_answer":
		return ApprovalExpired
	case g == "" && c.ans.Outcome == protocol.OutcomeCancelled:
		return ApprovalCancelled
	default:
		return ApprovalUnavailable
	}
}

// Observers returns an Observer that tells each of obs, in order; nil
// entries are skipped. With none left it returns nil.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) RunStarted() {
	for _, o := range m {
		o.RunStarted()
	}
}

func (m multiObserver) RunEnded(reason TerminationReason) {
	for _, o := range m {
		o.RunEnded(reason)
	}
}

func (m multiObserver) ModelCall(d time.Duration, usage Usage, err error) {
	for _, o := range m {
		o.ModelCall(d, usage, err)
	}
}

func (m multiObserver) CallEnded(tool string, outcome protocol.Outcome, d time.Duration) {
	for _, o := range m {
		o.CallEnded(tool, outcome, d)
	}
}

func (m multiObserver) Approval(result ApprovalResult) {
	for _, o := range m {
		o.Approval(result)
	}
}
