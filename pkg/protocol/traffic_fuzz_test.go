package protocol_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// FuzzDecodeTrafficNote: a note that decodes is valid, within its bound,
// and survives a round trip; one that does not is the zero note with a
// one-line error.
func FuzzDecodeTrafficNote(f *testing.F) {
	f.Add([]byte(`{"v":1,"tool":"t","action":"pause","until":"2026-01-01T00:00:00Z","by":"ann","reason":"bad deploy","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"tool":"t","action":"resume","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"tool":"t","action":"limit","rate":20,"burst":5,"at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"tool":"t","action":"pause","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"tool":"a.b","action":"stop","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := protocol.DecodeTrafficNote(data)
		if err != nil {
			if !reflect.DeepEqual(n, protocol.TrafficNote{}) {
				t.Fatalf("error %v with a non-zero note %+v", err, n)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error message spans lines: %q", err)
			}
			return
		}
		if len(data) > protocol.MaxTrafficNoteBytes {
			t.Fatalf("accepted %d bytes", len(data))
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("decoded note fails Validate: %v", err)
		}
		again, err := protocol.EncodeTrafficNote(&n)
		if err != nil {
			t.Fatal(err)
		}
		n2, err := protocol.DecodeTrafficNote(again)
		if err != nil || !reflect.DeepEqual(n, n2) {
			t.Fatalf("round trip: %+v, %v; want %+v", n2, err, n)
		}
	})
}

// FuzzDecodeRateLimit: a limit that decodes is within its bounds; one that
// does not is the zero limit.
func FuzzDecodeRateLimit(f *testing.F) {
	f.Add([]byte(`{"rate":20,"burst":5}`))
	f.Add([]byte(`{"rate":0}`))
	f.Add([]byte(`{"rate":-1}`))
	f.Add([]byte(`{"rate":1e400}`))
	f.Add([]byte(`{"rate":20,"burst":5,"x":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := protocol.DecodeRateLimit(data)
		if err != nil {
			if l != (protocol.RateLimit{}) {
				t.Fatalf("error %v with a non-zero limit %+v", err, l)
			}
			return
		}
		if l.Rate < 0 || l.Rate > protocol.MaxRate || l.Burst < 0 || l.Burst > protocol.MaxBurst || l.Rate != l.Rate {
			t.Fatalf("accepted %+v", l)
		}
	})
}
