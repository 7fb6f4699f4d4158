package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// auditNotes reads the runs' audit records of action from the traffic
// stream, as the operator.
func (f *parkFleet) auditNotes(action string) []runs.Note {
	f.t.Helper()
	_, js := approvalConn(f.t, f.url, "operator")
	subjects := protocol.Subjects{}
	cons, err := js.OrderedConsumer(f.t.Context(), subjects.TrafficStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{runs.NoteSubject(subjects, action)},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	var notes []runs.Note
	for {
		msgs, err := cons.FetchNoWait(100)
		if err != nil {
			f.t.Fatal(err)
		}
		n := 0
		for m := range msgs.Messages() {
			n++
			var note runs.Note
			if err := json.Unmarshal(m.Data(), &note); err != nil {
				f.t.Fatalf("audit record %s: %v", m.Data(), err)
			}
			notes = append(notes, note)
		}
		if n == 0 {
			return notes
		}
	}
}

// TestRunControlBulkResumeAndCancel: two parked runs are counted and
// listed by "runs resume --state parked" without --yes, which changes
// nothing; with --yes both are resumed and finish, each charge run once,
// and the change is recorded in FLEET_TRAFFIC first. A third parked run
// is cancelled by "runs cancel --state parked --yes": its result says
// cancelled, its second charge never ran, and that change is recorded too.
func TestRunControlBulkResumeAndCancel(t *testing.T) {
	t.Parallel()
	f := newParkFleet(t)
	f.serve("c1")
	r2, r3 := f.submit("park-2", "p2"), f.submit("park-3", "p3")
	f.waitResult(r2, "parked")
	f.waitResult(r3, "parked")

	out := f.must("operator", "runs", "resume", "--state", "parked")
	if !strings.Contains(out, "2 run(s) would be resumed") || !strings.Contains(out, string(r2)) || !strings.Contains(out, string(r3)) {
		t.Fatalf("runs resume --state parked (a count):\n%s", out)
	}
	for _, r := range []protocol.RunID{r2, r3} {
		if st := f.state(r); st.Status != runs.StatusParked || st.Owners != 1 {
			t.Fatalf("run %s after the count: %+v, want still parked", r, st)
		}
	}
	if notes := f.auditNotes("resume"); len(notes) != 0 {
		t.Fatalf("a count recorded %+v", notes)
	}
	if out, err := f.as("operator", "runs", "resume", "--yes"); err == nil {
		t.Fatalf("runs resume --yes without a filter succeeded:\n%s", out)
	}

	f.model.setDown(false)
	out = f.must("operator", "runs", "resume", "--state", "parked", "--client", "client", "--yes", "--reason", "provider back", "--timeout", "60s")
	if !strings.Contains(out, "2 run(s) resumed, 0 failed") {
		t.Fatalf("runs resume --yes:\n%s", out)
	}
	for i, r := range []protocol.RunID{r2, r3} {
		p := fmt.Sprintf("p%d", i+2)
		if res := f.waitResult(r, "natural"); res.Answer != "done "+p {
			t.Fatalf("run %s: answer %q", r, res.Answer)
		}
		if a, b := len(f.runsOf(p+"-a")), len(f.runsOf(p+"-b")); a != 1 || b != 1 {
			t.Fatalf("run %s: charges ran a=%d b=%d times, want each once", p, a, b)
		}
	}
	notes := f.auditNotes("resume")
	if len(notes) != 1 || notes[0].Count != 2 || notes[0].By != "e2e-operator" || notes[0].Reason != "provider back" ||
		notes[0].Filter.State != "parked" || notes[0].Filter.Client != "client" ||
		!slices.Contains(notes[0].Runs, r2) || !slices.Contains(notes[0].Runs, r3) {
		t.Fatalf("audit records of the resume: %+v", notes)
	}

	f.model.setDown(true)
	r4 := f.submit("park-4", "p4")
	f.waitResult(r4, "parked")
	out = f.must("operator", "runs", "cancel", "--state", "parked", "--older-than", "1ms", "--yes", "--reason", "gone for good", "--timeout", "60s")
	if !strings.Contains(out, "1 run(s) cancelled, 0 failed") {
		t.Fatalf("runs cancel --yes:\n%s", out)
	}
	f.waitResult(r4, "cancelled")
	if a, b := len(f.runsOf("p4-a")), len(f.runsOf("p4-b")); a != 1 || b != 0 {
		t.Fatalf("cancelled run: charges ran a=%d b=%d times, want 1 and 0", a, b)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if st := f.state(r4); st.Status != runs.StatusFinished || st.Termination != "cancelled" {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
	if notes := f.auditNotes("cancel"); len(notes) != 1 || notes[0].Count != 1 || notes[0].Runs[0] != r4 || notes[0].Filter.OlderThan != "1ms" {
		t.Fatalf("audit records of the cancel: %+v", notes)
	}
}
