package streammsg

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A direct get's answer: the stored headers, then the server's four.
func answer(stored nats.Header) nats.Header {
	h := nats.Header{}
	for k, v := range stored {
		h[k] = append([]string(nil), v...)
	}
	h.Add("Nats-Stream", "FLEET_APPROVALS")
	h.Add("Nats-Subject", "fleet.approval.decision.R.K")
	h.Add("Nats-Sequence", "42")
	h.Add("Nats-Time-Stamp", "2026-01-02T03:04:05.000000006Z")
	return h
}

func TestFromDirectGetTakesTheServersHeaders(t *testing.T) {
	for name, stored := range map[string]nats.Header{
		"none": {},
		"own":  {"Nats-Msg-Id": {"x"}},
		"imitated": {"Nats-Stream": {"KV_fleet_tools"}, "Nats-Subject": {"fleet.approval.decision.R.K"},
			"Nats-Sequence": {"7"}, "Nats-Time-Stamp": {"2020-01-01T00:00:00Z"}},
		"lower case": {"nats-subject": {"x"}},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := fromDirectGet(Msg{Subject: "first", Sequence: 1, Header: answer(stored)})
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject != "fleet.approval.decision.R.K" || m.Sequence != 42 ||
				!m.Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)) {
				t.Fatalf("got %s %d %v, want the server's", m.Subject, m.Sequence, m.Time)
			}
			if got, want := Reflected(m.Header), name == "imitated" || name == "lower case"; got != want {
				t.Fatalf("Reflected = %v, want %v (stored headers %v)", got, want, m.Header)
			}
			if name == "own" && m.Header.Get("Nats-Msg-Id") != "x" {
				t.Fatalf("stored headers lost: %v", m.Header)
			}
		})
	}
	if _, err := fromDirectGet(Msg{Header: nats.Header{"Nats-Subject": {"s"}}}); err == nil {
		t.Fatal("an answer without the server's headers accepted")
	}
}

func FuzzFromDirectGet(f *testing.F) {
	f.Add("s", "1", "2026-01-02T03:04:05Z", "k", "v")
	f.Add("", "x", "", "Nats-Stream", "S")
	f.Fuzz(func(t *testing.T, subj, seq, ts, k, v string) {
		h := nats.Header{k: {v}}
		h.Add("Nats-Subject", subj)
		h.Add("Nats-Sequence", seq)
		h.Add("Nats-Time-Stamp", ts)
		m, err := fromDirectGet(Msg{Header: h})
		if err != nil {
			return
		}
		if m.Subject != subj {
			t.Fatalf("subject %q, want %q", m.Subject, subj)
		}
		_ = Reflected(m.Header)
	})
}
