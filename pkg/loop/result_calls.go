package loop

import (
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// CallResult is one tool call of a run as a caller reads it: how it ended,
// what the model was told, how long it took and which worker ran it. It is
// read from a [Result] by [Result.Call] or [Result.CallResults].
type CallResult struct {
	// CallID is the call's tool_call_id in the transcript (the loop's own
	// id where it replaced the model's: see "Call ids" in the package
	// documentation).
	CallID string
	// Round is the round the model made the call in, from 1.
	Round int
	// Tool is the name the model wrote, clipped and escaped when it is not
	// a valid tool name.
	Tool string
	// Outcome is how the call ended ([protocol.Outcome]); the model reads
	// it through Observation ([OutcomeTexts]).
	Outcome protocol.Outcome
	// Observation is the content of the tool message that answered the
	// call: the tool's output, or the loop's text for the outcome. It is
	// empty when the result holds no transcript (a served run's result
	// stored without it: protocol.RunResult.TranscriptOmitted).
	Observation string
	// Duration is the coordinator's wall time from the start of the call's
	// handling (validation, approval, dispatch) to its answer, to the
	// millisecond.
	Duration time.Duration
	// Worker names the worker that ran the call; empty when none did (the
	// call was refused, denied, or nobody answered).
	Worker string
	// Attempt counts the worker's deliveries of the call, from 1; 0 when no
	// worker reported one.
	Attempt int
	// ErrorType is set for a failed call: the worker's error type (a type
	// or exit status, never a message), or "dispatch" when the call could
	// not be published.
	ErrorType string
	// CallKey is the coordinator's key for the call (its subjects and
	// journal entries); empty for a rejected call.
	CallKey protocol.CallKey
}

// Call returns the call of this run whose tool_call_id is id, and false
// when the run made no such call (an id of the input transcript, of a
// dropped call, or none at all).
func (r *Result) Call(id string) (CallResult, bool) {
	for i := range r.Calls {
		if r.Calls[i].CallID == id {
			return r.callResult(&r.Calls[i], r.observations()), true
		}
	}
	return CallResult{}, false
}

// CallResults returns every call of this run, one per tool_call_id, in
// transcript order (the order of [Result.Calls]).
func (r *Result) CallResults() []CallResult {
	obs := r.observations()
	out := make([]CallResult, len(r.Calls))
	for i := range r.Calls {
		out[i] = r.callResult(&r.Calls[i], obs)
	}
	return out
}

// observations maps each tool message's tool_call_id to its content.
func (r *Result) observations() map[string]string {
	obs := make(map[string]string, len(r.Calls))
	for _, m := range r.Messages {
		if m.Role == "tool" {
			obs[m.ToolCallID] = m.Content
		}
	}
	return obs
}

func (r *Result) callResult(c *CallRecord, obs map[string]string) CallResult {
	return CallResult{CallID: c.CallID, Round: c.Round, Tool: c.Tool, Outcome: c.Outcome, Observation: obs[c.CallID],
		Duration: time.Duration(c.DurationMS) * time.Millisecond, Worker: c.Worker, Attempt: c.Attempt,
		ErrorType: c.ErrorType, CallKey: c.CallKey}
}
