package protocol

import (
	"testing"
)

// FuzzDecodeRunCancelRequest: the cancel request decoder never panics nor
// returns an error of another type; what it accepts passes Validate, names
// the run it was decoded for and its author, and survives an
// encode/decode round trip.
func FuzzDecodeRunCancelRequest(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"run_id":"r1","by":"alice","reason":"stuck","at":"2026-12-07T04:00:00Z"}`,
		`{"v":1,"run_id":"r1","by":"alice"}`,
		`{"v":1,"run_id":"r2","by":"alice"}`,
		`{"v":1,"run_id":"r1"}`,
		`{"v":1,"run_id":"r1","by":""}`,
		`{"stream":"FLEET_RUNS","seq":1}`,
		`{"stream":"FLEET_RUNS","seq":1,"duplicate":true}`,
		`{"v":1,"reason":"x"}`, `{}`, `[]`, `null`, "", "\x00{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRunCancelRequest(data, "r1", 4096)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T, want *protocol.Error", err)
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted request fails Validate: %v", err)
		}
		if req.RunID != "r1" || req.By == "" {
			t.Fatalf("accepted %+v for run r1", req)
		}
		enc, err := Encode(&req)
		if err != nil {
			t.Fatalf("accepted request does not encode: %v", err)
		}
		if _, err := DecodeRunCancelRequest(enc, "r1", 1<<20); err != nil {
			t.Fatalf("re-encoded request refused: %v\n%s", err, enc)
		}
	})
}

// TestDecodeRunCancelRequest: a cancel request counts only when it decodes,
// names the run of its subject and names its author.
func TestDecodeRunCancelRequest(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		ok         bool
	}{
		{"valid", `{"v":1,"run_id":"r1","by":"alice","reason":"stuck"}`, true},
		{"a server's acknowledgement", `{"stream":"FLEET_RUNS","seq":1}`, false},
		{"another run", `{"v":1,"run_id":"r2","by":"alice"}`, false},
		{"no author", `{"v":1,"run_id":"r1"}`, false},
		{"no run", `{"v":1,"by":"alice"}`, false},
		{"garbage", `garbage`, false},
		{"empty", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRunCancelRequest([]byte(tc.data), "r1", 4096)
			if (err == nil) != tc.ok {
				t.Fatalf("err=%v, want ok=%v", err, tc.ok)
			}
		})
	}
}
