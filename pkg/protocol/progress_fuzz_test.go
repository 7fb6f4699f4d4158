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
		startedSeed,
		`{"v":1,"run_id":"r1","call_key":"k1","tool":"calc","started_at":"2026-12-07T10:00:00Z","seq":1,"message":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := protocol.DecodeProgress(data, 0)
		if _, serr := protocol.DecodeCallStarted(data, 0); err == nil && serr == nil {
			t.Fatalf("one message decoded as both a progress report and a start: %q", data)
		}
		if err != nil {
			return
		}
		if p.Seq == 0 || p.Message == "" || len(p.Message) > protocol.MaxProgressBytes || !utf8.ValidString(p.Message) || !p.RunID.Valid() || !p.CallKey.Valid() {
			t.Fatalf("decoded an invalid report: %+v", p)
		}
	})
}

// startedSeed is a valid [protocol.CallStarted].
const startedSeed = `{"v":1,"run_id":"r1","call_key":"k1","call_id":"call_1","tool":"calc","worker":"w1","started_at":"2026-12-07T10:00:00Z"}`

// FuzzDecodeCallStarted: any message decodes to a valid start or a typed
// error; a valid one keeps the bounds, and is never a progress report.
func FuzzDecodeCallStarted(f *testing.F) {
	for _, s := range []string{
		startedSeed,
		`{"v":1,"run_id":"r1","call_key":"k1","tool":"calc","started_at":"2026-12-07T10:00:00Z"}`,
		`{"v":1,"run_id":"r1","call_key":"k1","tool":"calc"}`,
		`{"v":1,"run_id":"r1","call_key":"k1","tool":"a.b","started_at":"2026-12-07T10:00:00Z"}`,
		`{"v":1,"run_id":"r1","call_key":"k1","tool":"calc","worker":"\u001b[2J","started_at":"2026-12-07T10:00:00Z"}`,
		`{"v":1,"run_id":"r1","call_key":"k1","call_id":"call_1","tool":"calc","worker":"w","seq":9,"message":"x"}`,
		`{"v":2}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := protocol.DecodeCallStarted(data, 0)
		if err != nil {
			return
		}
		if !p.RunID.Valid() || !p.CallKey.Valid() || !p.Tool.Valid() || p.StartedAt.IsZero() ||
			len(p.Worker) > 256 || !utf8.ValidString(p.Worker) || len(p.CallID) > 256 || !utf8.ValidString(string(p.CallID)) {
			t.Fatalf("decoded an invalid start: %+v", p)
		}
		if _, err := protocol.DecodeProgress(data, 0); err == nil {
			t.Fatalf("a start decoded as a progress report: %q", data)
		}
	})
}
