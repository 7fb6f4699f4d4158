package protocol

import (
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
// transform is read from its subject and its Nats-Msg-Id, which must name
// the subject's client; one stored before the transform, from its subject.
func TestParseStoredSubmission(t *testing.T) {
	var s Subjects
	for _, tt := range []struct {
		name, subject, msgID string
		client, agent, id    string
		ok                   bool
	}{
		{"queued", "fleet.run.queued.alice.default", SubmissionMsgID("alice", "q-1"), "alice", "default", "q-1", true},
		{"former layout", "fleet.run.submit.alice.default.q-1", "", "alice", "default", "q-1", true},
		{"former layout, another msg id", "fleet.run.submit.alice.default.q-1", SubmissionMsgID("alice", "q-2"), "alice", "default", "q-1", true},
		{"no msg id", "fleet.run.queued.alice.default", "", "", "", "", false},
		{"another client's msg id", "fleet.run.queued.alice.default", SubmissionMsgID("bob", "q-1"), "", "", "", false},
		{"a longer client's msg id", "fleet.run.queued.al.default", SubmissionMsgID("alice", "q-1"), "", "", "", false},
		{"msg id of no submission", "fleet.run.queued.alice.default", "q-1", "", "", "", false},
		{"empty submission id", "fleet.run.queued.alice.default", SubmissionMsgID("alice", ""), "", "", "", false},
		{"resubmitted", "fleet.run.queued.alice.default", ResubmissionMsgID("alice", "q-1", 42), "alice", "default", "q-1", true},
		{"resubmission mark without seq", "fleet.run.queued.alice.default", SubmissionMsgID("alice", "q-1") + ".resume-", "", "", "", false},
		{"resubmission seq not digits", "fleet.run.queued.alice.default", SubmissionMsgID("alice", "q-1") + ".resume-4x", "", "", "", false},
		{"submission id not a token", "fleet.run.queued.alice.default", SubmissionMsgID("alice", "q.1"), "", "", "", false},
		{"too many tokens", "fleet.run.queued.alice.default.x", SubmissionMsgID("alice", "q-1"), "", "", "", false},
		{"no agent", "fleet.run.queued.alice", SubmissionMsgID("alice", "q-1"), "", "", "", false},
		{"another prefix", "other.run.queued.alice.default", SubmissionMsgID("alice", "q-1"), "", "", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, agent, id, ok := s.ParseStoredSubmission(tt.subject, tt.msgID)
			if ok != tt.ok || client != tt.client || agent != tt.agent || id != tt.id {
				t.Fatalf("ParseStoredSubmission = %q %q %q %v, want %q %q %q %v", client, agent, id, ok, tt.client, tt.agent, tt.id, tt.ok)
			}
		})
	}
	if s.RunsQueued() != "fleet.run.queued.*.*" || s.QueuedRuns() != "fleet.run.queued.{{wildcard(1)}}.{{wildcard(2)}}" {
		t.Fatalf("RunsQueued = %q, QueuedRuns = %q", s.RunsQueued(), s.QueuedRuns())
	}
}

// FuzzParseStoredSubmission: whatever it accepts names valid tokens, and
// a submission read from the transformed subject carries the msg id its
// client sends for it.
func FuzzParseStoredSubmission(f *testing.F) {
	f.Add("fleet.run.queued.alice.default", "submit-5-alice-q-1")
	f.Add("fleet.run.submit.alice.default.q-1", "")
	f.Add("fleet.run.queued.a.b", "submit-1-a-")
	f.Fuzz(func(t *testing.T, subject, msgID string) {
		var s Subjects
		client, agent, id, ok := s.ParseStoredSubmission(subject, msgID)
		if !ok {
			return
		}
		if !ValidToken(client) || !ValidToken(agent) || !ValidToken(id) {
			t.Fatalf("ParseStoredSubmission(%q, %q) = %q %q %q", subject, msgID, client, agent, id)
		}
		if old, _ := s.RunSubmission(client, agent, id); old != subject &&
			(subject != "fleet.run.queued."+client+"."+agent || msgID != SubmissionMsgID(client, id)) {
			t.Fatalf("ParseStoredSubmission(%q, %q) = %q %q %q, which is neither layout", subject, msgID, client, agent, id)
		}
	})
}
