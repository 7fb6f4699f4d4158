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
