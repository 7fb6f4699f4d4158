package protocol_test

import (
	"testing"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// FuzzDecodeProgress: any message decodes to a valid report or a typed
// error, and a valid one keeps the bounds.
func FuzzDecodeProgress(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"run_id":"r1","call_key":"k1","seq":1,"message":"step 1"}`,
		`{"v":1,"run_id":"r1","call_key":"k1","call_id":"call_1","tool":"calc","worker":"w","seq":9,"message":"x","dropped":3}`,
		`{"v":1,"run_id":"r1","call_key":"k1","seq":0,"message":"x"}`,
		`{"v":1,"run_id":"r.1","call_key":"k1","seq":1,"message":"x"}`,
		`{"v":1,"run_id":"r1","call_key":"k1","seq":1,"message":"\u001b]52;c;aGk=\u0007"}`,
		`{"v":2}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := protocol.DecodeProgress(data, 0)
		if err != nil {
			return
		}
		if p.Seq == 0 || p.Message == "" || len(p.Message) > protocol.MaxProgressBytes || !utf8.ValidString(p.Message) || !p.RunID.Valid() || !p.CallKey.Valid() {
			t.Fatalf("decoded an invalid report: %+v", p)
		}
	})
}
