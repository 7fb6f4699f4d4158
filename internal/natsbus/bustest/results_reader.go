package bustest

import (
	"testing"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// StoreResult stores an ok result of key for run on its echo subject and
// returns its key.
func (f *Fleet) StoreResult(t *testing.T, run protocol.RunID) protocol.CallKey {
	t.Helper()
	subj, _ := f.Subjects.Result(run, "echo")
	r := protocol.Result{V: 1, RunID: run, CallKey: protocol.NewCallKey(), Outcome: protocol.OutcomeOK}
	data, _ := protocol.Encode(&r)
	if _, err := f.JS.Publish(Ctx(t), subj, data); err != nil {
		t.Fatal(err)
	}
	return r.CallKey
}

// ResultsConsumers counts the consumers of the results stream.
func (f *Fleet) ResultsConsumers(t *testing.T) int {
	t.Helper()
	s, err := f.JS.Stream(Ctx(t), f.Subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}
