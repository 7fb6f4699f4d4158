package protocol

import "testing"

// FuzzDecodeRunInput: the run input decoder never panics nor returns an
// error of another type; what it accepts passes Validate, names the run it
// was decoded for, a mode and a bounded content, and survives an
// encode/decode round trip.
func FuzzDecodeRunInput(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"run_id":"r1","mode":"interrupt","content":"stop"}`,
		`{"v":1,"run_id":"r1","mode":"enqueue","content":"and this"}`,
		`{"v":1,"run_id":"r2","mode":"enqueue","content":"x"}`,
		`{"v":1,"run_id":"r1","mode":"now","content":"x"}`,
		`{"v":1,"run_id":"r1","mode":"enqueue","content":"  "}`,
		`{"v":1,"run_id":"r1","mode":"enqueue","content":"x","extra":1}`,
		`{}`, `[]`, `null`, "", "\x00{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := DecodeRunInput(data, "r1")
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T, want *protocol.Error", err)
			}
			return
		}
		if err := in.Validate(); err != nil {
			t.Fatalf("accepted input fails Validate: %v", err)
		}
		if in.RunID != "r1" || len(in.Content) > MaxRunInputContent {
			t.Fatalf("accepted %+v for run r1", in)
		}
		enc, err := Encode(&in)
		if err != nil {
			t.Fatalf("accepted input does not encode: %v", err)
		}
		if _, err := DecodeRunInput(enc, "r1"); err != nil {
			t.Fatalf("re-encoded input refused: %v\n%s", err, enc)
		}
	})
}

// TestParseRunInput: a run input subject names its client and run; any
// other subject is not one.
func TestParseRunInput(t *testing.T) {
	s := Subjects{}
	for _, tc := range []struct {
		subject, client string
		run             RunID
		ok              bool
	}{
		{"fleet.run.input.alice.r1", "alice", "r1", true},
		{"fleet.run.input.r1", "", "r1", true},
		{"fleet.run.input.alice.r1.x", "", "", false},
		{"fleet.run.submit.alice.r1", "", "", false},
		{"fleet.run.input.", "", "", false},
	} {
		client, run, ok := s.ParseRunInput(tc.subject)
		if ok != tc.ok || (ok && (client != tc.client || run != tc.run)) {
			t.Fatalf("%s: %q %q %v", tc.subject, client, run, ok)
		}
		if ok {
			if back, err := s.RunInput(client, run); err != nil || back != tc.subject {
				t.Fatalf("%s: back %q %v", tc.subject, back, err)
			}
		}
	}
}
