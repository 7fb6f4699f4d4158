package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestRunSubmission(t *testing.T) {
	var s Subjects
	subj, err := s.RunSubmission("alice", DefaultAgent, "q-1")
	if err != nil || subj != "fleet.run.submit.alice.default.q-1" {
		t.Fatalf("RunSubmission = %q, %v", subj, err)
	}
	if s.RunSubmissions() != "fleet.run.submit.*.*.*" {
		t.Fatalf("RunSubmissions = %q", s.RunSubmissions())
	}
	client, agent, id, ok := s.ParseRunSubmission(subj)
	if !ok || client != "alice" || agent != "default" || id != "q-1" {
		t.Fatalf("ParseRunSubmission = %q %q %q %v", client, agent, id, ok)
	}
	for _, bad := range []string{"fleet.run.submit", "fleet.run.submit.a.b", "fleet.run.submit.a.b.c.d", "other.run.submit.a.b.c",
		"fleet.run.submit.a..c", "fleet.run.submit.a.b.c d", "fleet.run.submit.a.b." + strings.Repeat("x", 65)} {
		if _, _, _, ok := s.ParseRunSubmission(bad); ok {
			t.Errorf("ParseRunSubmission(%q) accepted", bad)
		}
	}
	for _, bad := range [][3]string{{"a.b", "d", "x"}, {"a", "*", "x"}, {"a", "d", ">"}, {"", "d", "x"}} {
		if _, err := s.RunSubmission(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("RunSubmission(%q) accepted", bad)
		}
	}
}

// TestSubmissionIDs: the run id and the dedup id of a submission are the
// same for a retry and differ between clients, however their names and
// ids are cut.
func TestSubmissionIDs(t *testing.T) {
	run := SubmissionRunID("alice", "q-1")
	if !run.Valid() || len(run) != 22 || SubmissionRunID("alice", "q-1") != run {
		t.Fatalf("SubmissionRunID = %q, want a stable 22-character token", run)
	}
	pairs := [][2][2]string{
		{{"alice", "q-1"}, {"bob", "q-1"}},
		{{"a-1", "x"}, {"a", "1-x"}},
		{{"a", "3-x"}, {"a-1", "x"}},
		{{"a-b", "c"}, {"a", "b-c"}},
	}
	for _, p := range pairs {
		if SubmissionRunID(p[0][0], p[0][1]) == SubmissionRunID(p[1][0], p[1][1]) {
			t.Errorf("SubmissionRunID collides for %v and %v", p[0], p[1])
		}
		if SubmissionMsgID(p[0][0], p[0][1]) == SubmissionMsgID(p[1][0], p[1][1]) {
			t.Errorf("SubmissionMsgID collides for %v and %v", p[0], p[1])
		}
	}
}

// FuzzParseRunSubmission: whatever it accepts has three valid tokens and
// builds back to the same subject.
func FuzzParseRunSubmission(f *testing.F) {
	f.Add("fleet.run.submit.alice.default.q-1")
	f.Add("fleet.run.submit.a.b")
	f.Add("fleet.run.submit...")
	f.Fuzz(func(t *testing.T, subject string) {
		var s Subjects
		client, agent, id, ok := s.ParseRunSubmission(subject)
		if !ok {
			return
		}
		again, err := s.RunSubmission(client, agent, id)
		if err != nil || again != subject {
			t.Fatalf("ParseRunSubmission(%q) = %q %q %q, which builds %q, %v", subject, client, agent, id, again, err)
		}
	})
}

// TestParseStoredSubmission: a submission stored under the runs stream's
// transform is read from its subject (the client), its Nats-Msg-Id (the
// submission id, which must name the subject's client) and its Fleet-Agent
// header (the agent); one stored under the former transform, with the agent
// in its subject, and one stored before any transform, from its subject. A
// run whose header names no agent is known, and refused naming the header.
func TestParseStoredSubmission(t *testing.T) {
	var s Subjects
	for _, tt := range []struct {
		name, subject, msgID, header string
		want                         StoredSubmission
		errField                     string // "" for no error
	}{
		{"queued", "fleet.run.queued.alice", SubmissionMsgID("alice", "q-1"), "support", StoredSubmission{"alice", "q-1", "support"}, ""},
		{"queued, resubmitted", "fleet.run.queued.alice", ResubmissionMsgID("alice", "q-1", 42), "support", StoredSubmission{"alice", "q-1", "support"}, ""},
		{"queued, no agent header", "fleet.run.queued.alice", SubmissionMsgID("alice", "q-1"), "", StoredSubmission{Client: "alice", Submission: "q-1"}, HeaderAgent},
		{"queued, agent header not a token", "fleet.run.queued.alice", SubmissionMsgID("alice", "q-1"), "a.b", StoredSubmission{Client: "alice", Submission: "q-1"}, HeaderAgent},
		{"queued, agent header a wildcard", "fleet.run.queued.alice", SubmissionMsgID("alice", "q-1"), ">", StoredSubmission{Client: "alice", Submission: "q-1"}, HeaderAgent},
		{"queued, no msg id", "fleet.run.queued.alice", "", "support", StoredSubmission{}, HeaderMsgID},
		{"queued, another client's msg id", "fleet.run.queued.alice", SubmissionMsgID("bob", "q-1"), "support", StoredSubmission{}, HeaderMsgID},
		{"former queued", "fleet.run.queued.alice.default", SubmissionMsgID("alice", "q-1"), "", StoredSubmission{"alice", "q-1", "default"}, ""},
		{"former queued: the subject's agent, not the header's", "fleet.run.queued.alice.default", SubmissionMsgID("alice", "q-1"), "ops", StoredSubmission{"alice", "q-1", "default"}, ""},
		{"pre-transform layout", "fleet.run.submit.alice.default.q-1", "", "", StoredSubmission{"alice", "q-1", "default"}, ""},
		{"pre-transform layout, another msg id", "fleet.run.submit.alice.default.q-1", SubmissionMsgID("alice", "q-2"), "ops", StoredSubmission{"alice", "q-1", "default"}, ""},
		{"no msg id", "fleet.run.queued.alice.default", "", "", StoredSubmission{}, HeaderMsgID},
		{"another client's msg id", "fleet.run.queued.alice.default", SubmissionMsgID("bob", "q-1"), "", StoredSubmission{}, HeaderMsgID},
		{"a longer client's msg id", "fleet.run.queued.al.default", SubmissionMsgID("alice", "q-1"), "", StoredSubmission{}, HeaderMsgID},
		{"msg id of no submission", "fleet.run.queued.alice.default", "q-1", "", StoredSubmission{}, HeaderMsgID},
		{"empty submission id", "fleet.run.queued.alice", SubmissionMsgID("alice", ""), "support", StoredSubmission{}, HeaderMsgID},
		{"resubmitted, former queued", "fleet.run.queued.alice.default", ResubmissionMsgID("alice", "q-1", 42), "", StoredSubmission{"alice", "q-1", "default"}, ""},
		{"resubmission mark without seq", "fleet.run.queued.alice", SubmissionMsgID("alice", "q-1") + ".resume-", "support", StoredSubmission{}, HeaderMsgID},
		{"resubmission seq not digits", "fleet.run.queued.alice", SubmissionMsgID("alice", "q-1") + ".resume-4x", "support", StoredSubmission{}, HeaderMsgID},
		{"submission id not a token", "fleet.run.queued.alice", SubmissionMsgID("alice", "q.1"), "support", StoredSubmission{}, HeaderMsgID},
		{"too many tokens", "fleet.run.queued.alice.default.x", SubmissionMsgID("alice", "q-1"), "support", StoredSubmission{}, "subject"},
		{"no client", "fleet.run.queued.", SubmissionMsgID("", "q-1"), "support", StoredSubmission{}, "subject"},
		{"empty agent token", "fleet.run.queued.alice.", SubmissionMsgID("alice", "q-1"), "support", StoredSubmission{}, "subject"},
		{"another prefix", "other.run.queued.alice", SubmissionMsgID("alice", "q-1"), "support", StoredSubmission{}, "subject"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ParseStoredSubmission(tt.subject, tt.msgID, tt.header)
			var pe *Error
			switch {
			case got != tt.want:
				t.Fatalf("ParseStoredSubmission = %+v, %v; want %+v", got, err, tt.want)
			case tt.errField == "" && err != nil:
				t.Fatalf("ParseStoredSubmission: %v, want no error", err)
			case tt.errField != "" && (!errors.As(err, &pe) || pe.Code != CodeInvalidField || pe.Field != tt.errField):
				t.Fatalf("ParseStoredSubmission: %v, want invalid_field naming %s", err, tt.errField)
			}
		})
	}
	if s.RunsQueued() != "fleet.run.queued.>" || s.QueuedRuns() != "fleet.run.queued.{{wildcard(1)}}" {
		t.Fatalf("RunsQueued = %q, QueuedRuns = %q", s.RunsQueued(), s.QueuedRuns())
	}
}

// FuzzParseStoredSubmission: whatever it accepts names valid tokens and is
// one of the three layouts, read as its client sends it; a run it knows
// but refuses for its agent header is of the current layout, with a header
// that is not a token, and names no agent.
func FuzzParseStoredSubmission(f *testing.F) {
	f.Add("fleet.run.queued.alice", "submit-5-alice-q-1", "support")
	f.Add("fleet.run.queued.alice", "submit-5-alice-q-1.resume-7", "")
	f.Add("fleet.run.queued.alice.default", "submit-5-alice-q-1", "")
	f.Add("fleet.run.submit.alice.default.q-1", "", "ops")
	f.Add("fleet.run.queued.a.b", "submit-1-a-", "x")
	f.Fuzz(func(t *testing.T, subject, msgID, header string) {
		var s Subjects
		got, err := s.ParseStoredSubmission(subject, msgID, header)
		// sentBy: msgID is what the client (or a resume) sends for the
		// submission.
		sentBy := func() bool {
			rest, ok := strings.CutPrefix(msgID, SubmissionMsgID(got.Client, got.Submission))
			again, resumed := strings.CutPrefix(rest, resubmissionMark)
			return ok && (rest == "" || resumed && digits(again))
		}
		if err != nil {
			if got == (StoredSubmission{}) {
				return
			}
			if got.Agent != "" || ValidToken(header) || subject != "fleet.run.queued."+got.Client || !sentBy() {
				t.Fatalf("ParseStoredSubmission(%q, %q, %q) = %+v, %v: a known run refused for another reason than its header", subject, msgID, header, got, err)
			}
			return
		}
		if !ValidToken(got.Client) || !ValidToken(got.Agent) || !ValidToken(got.Submission) {
			t.Fatalf("ParseStoredSubmission(%q, %q, %q) = %+v", subject, msgID, header, got)
		}
		old, _ := s.RunSubmission(got.Client, got.Agent, got.Submission)
		switch {
		case subject == old:
		case subject == "fleet.run.queued."+got.Client+"."+got.Agent && sentBy():
		case subject == "fleet.run.queued."+got.Client && got.Agent == header && sentBy():
		default:
			t.Fatalf("ParseStoredSubmission(%q, %q, %q) = %+v, which is none of the layouts", subject, msgID, header, got)
		}
	})
}
