package protocol

import "testing"

// TestOutcomeTable: every outcome is in the table once, valid, with a
// code that is a valid token (it is a metrics label and a schema enum),
// and what a worker may report is exactly what the table says.
func TestOutcomeTable(t *testing.T) {
	seen := map[Outcome]bool{}
	for _, row := range outcomeTable {
		o := row.outcome
		if seen[o] {
			t.Errorf("outcome %q is in the table twice", o)
		}
		seen[o] = true
		if !o.Valid() {
			t.Errorf("%q.Valid() = false, want true", o)
		}
		if !ValidToken(string(o)) {
			t.Errorf("outcome %q is not a valid token", o)
		}
		if got := o.ByWorker(); got != row.byWorker {
			t.Errorf("%q.ByWorker() = %v, want %v", o, got, row.byWorker)
		}
	}
	if len(Outcomes) != len(outcomeTable) {
		t.Errorf("len(Outcomes) = %d, want %d", len(Outcomes), len(outcomeTable))
	}
	for _, o := range []Outcome{"", "OK", "nope"} {
		if o.Valid() || o.ByWorker() {
			t.Errorf("%q: Valid or ByWorker true, want false", o)
		}
	}
}
