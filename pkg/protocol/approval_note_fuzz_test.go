package protocol_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// FuzzDecodeApprovalNote: a note that decodes is valid, within its bound,
// and survives a round trip; one that does not is the zero note with a
// one-line error.
func FuzzDecodeApprovalNote(f *testing.F) {
	f.Add([]byte(`{"v":1,"run_id":"r","call_key":"k","tool":"t","digest":"d","outcome":"approved","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"run_id":"r","call_key":"k","tool":"t","digest":"d","outcome":"maybe","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := protocol.DecodeApprovalNote(data)
		if err != nil {
			if n != (protocol.ApprovalNote{}) {
				t.Fatalf("error %v with a non-zero note %+v", err, n)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error message spans lines: %q", err)
			}
			return
		}
		if len(data) > protocol.MaxApprovalNoteBytes {
			t.Fatalf("accepted %d bytes", len(data))
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("decoded note fails Validate: %v", err)
		}
		again, err := protocol.EncodeApprovalNote(&n)
		if err != nil {
			t.Fatal(err)
		}
		n2, err := protocol.DecodeApprovalNote(again)
		if err != nil || !reflect.DeepEqual(n, n2) {
			t.Fatalf("round trip: %+v, %v; want %+v", n2, err, n)
		}
	})
}
