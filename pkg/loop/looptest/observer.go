package looptest

import (
	"fmt"
	"sync"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Observer is a [loop.Observer] that records what it is told, for tests. It
// is safe for concurrent use.
type Observer struct {
	mu               sync.Mutex
	runsStarted      int
	runs             map[loop.TerminationReason]int
	modelCalls       int
	modelErrors      int
	promptTokens     int
	completionTokens int
	calls            map[string]int // "tool/outcome"
	approvals        map[loop.ApprovalResult]int
	durations        []time.Duration
}

var _ loop.Observer = (*Observer)(nil)

// NewObserver returns an empty Observer.
func NewObserver() *Observer {
	return &Observer{
		runs:      map[loop.TerminationReason]int{},
		calls:     map[string]int{},
		approvals: map[loop.ApprovalResult]int{},
	}
}

// RunStarted implements [loop.Observer].
func (o *Observer) RunStarted() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.runsStarted++
}

// RunEnded implements [loop.Observer].
func (o *Observer) RunEnded(reason loop.TerminationReason) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.runs[reason]++
}

// ModelCall implements [loop.Observer].
func (o *Observer) ModelCall(_ time.Duration, u loop.Usage, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.modelCalls++
	if err != nil {
		o.modelErrors++
	}
	o.promptTokens += u.PromptTokens
	o.completionTokens += u.CompletionTokens
}

// CallEnded implements [loop.Observer].
func (o *Observer) CallEnded(tool string, outcome protocol.Outcome, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[CallLabel(tool, outcome)]++
	o.durations = append(o.durations, d)
}

// Approval implements [loop.Observer].
func (o *Observer) Approval(r loop.ApprovalResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.approvals[r]++
}

// CallLabel is the key of [Observer.Calls]: "tool/outcome".
func CallLabel(tool string, outcome protocol.Outcome) string {
	return fmt.Sprintf("%s/%s", tool, outcome)
}

// RunsStarted counts RunStarted calls.
func (o *Observer) RunsStarted() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runsStarted
}

// Runs counts ended runs by termination reason.
func (o *Observer) Runs() map[loop.TerminationReason]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[loop.TerminationReason]int, len(o.runs))
	for k, v := range o.runs {
		out[k] = v
	}
	return out
}

// Calls counts ended calls by [CallLabel].
func (o *Observer) Calls() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]int, len(o.calls))
	for k, v := range o.calls {
		out[k] = v
	}
	return out
}

// Durations lists the durations of ended calls, in the order reported.
func (o *Observer) Durations() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Duration(nil), o.durations...)
}

// Approvals counts approvals by result.
func (o *Observer) Approvals() map[loop.ApprovalResult]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[loop.ApprovalResult]int, len(o.approvals))
	for k, v := range o.approvals {
		out[k] = v
	}
	return out
}

// ModelCalls returns the model calls, the failed ones and the tokens
// reported.
func (o *Observer) ModelCalls() (calls, errors, promptTokens, completionTokens int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.modelCalls, o.modelErrors, o.promptTokens, o.completionTokens
}
