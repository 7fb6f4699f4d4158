package bustest

import (
	"testing"
)

// SetShare sets the calls stream's max_msgs_per_subject, as an operator
// does with "nats stream edit FLEET_CALLS --max-msgs-per-subject N".
func (f *Fleet) SetShare(t *testing.T, n int64) {
	t.Helper()
	st, err := f.JS.Stream(Ctx(t), f.Subjects.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgsPerSubject = n
	if _, err := f.JS.UpdateStream(Ctx(t), cfg); err != nil {
		t.Fatalf("setting max_msgs_per_subject: %v", err)
	}
}
