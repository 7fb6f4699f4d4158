package stores

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// FuzzDecodeJournalEntry: any bytes decode to an entry with a kind or to
// an error, never a panic, and a decoded entry encodes and decodes again
// to the same entry.
func FuzzDecodeJournalEntry(f *testing.F) {
	f.Add([]byte(`{"kind":"model","round":1,"response":{"message":{"role":"assistant","content":"hi"},"usage":{"prompt_tokens":1,"completion_tokens":2}}}`))
	f.Add([]byte(`{"kind":"dispatched","round":2,"calls":[{"call_key":"k","tool":"t","timeout_ms":5,"deadline":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"kind":"observed","round":2,"observations":[{"call_key":"k","outcome":"ok","content":"x"}]}`))
	f.Add([]byte(`{"kind":"owner","owner":"c1","at":"2026-01-01T00:00:00Z","data":{"a":1}}`))
	f.Add([]byte(`{"kind":"x"} {}`))
	f.Add([]byte(`{"kind":"x","extra":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e loop.JournalEntry
		if err := decodeJournalEntry(data, &e); err != nil {
			return
		}
		if e.Kind == "" {
			t.Fatalf("decoded an entry without a kind from %q", data)
		}
		again, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var e2 loop.JournalEntry
		if err := decodeJournalEntry(again, &e2); err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
	})
}

// FuzzDecodeJournalEntries: any bytes decode to 1 to maxJournalBatch
// entries, each with a kind, or to an error, never a panic; decoded
// entries encode and decode again to as many.
func FuzzDecodeJournalEntries(f *testing.F) {
	f.Add([]byte(`{"kind":"model","round":1}`))
	f.Add([]byte(`[{"kind":"model","round":1,"response":{"message":{"role":"assistant","content":"hi"},"usage":{}}},{"kind":"dispatched","round":1,"calls":[{"call_key":"k","tool":"t"}]}]`))
	f.Add([]byte(`[{"kind":"model"}]`))
	f.Add([]byte(`[{"kind":"a"},{"kind":"b"}] []`))
	f.Add([]byte(`[{"kind":"a"},null]`))
	f.Add([]byte(`[{"kind":"a"},[{"kind":"b"}]]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := decodeJournalEntries(data)
		if err != nil {
			return
		}
		if len(es) < 1 || len(es) > maxJournalBatch {
			t.Fatalf("decoded %d entries from %q", len(es), data)
		}
		for _, e := range es {
			if e.Kind == "" {
				t.Fatalf("decoded an entry without a kind from %q", data)
			}
		}
		var again []byte
		if len(es) == 1 {
			again, err = json.Marshal(es[0])
		} else {
			again, err = json.Marshal(es)
		}
		if err != nil {
			t.Fatal(err)
		}
		es2, err := decodeJournalEntries(again)
		if err != nil || len(es2) != len(es) {
			t.Fatalf("re-decoding %s: %d entries, %v", again, len(es2), err)
		}
	})
}

// FuzzDecodeMsgGet: any bytes decode to a message or to an error (the
// server's, ErrMsgNotFound only for its code), never both, never a panic.
func FuzzDecodeMsgGet(f *testing.F) {
	hdr := base64.StdEncoding.EncodeToString([]byte("NATS/1.0\r\nNats-Msg-Id: fleet.journal.r@3@t\r\n\r\n"))
	f.Add([]byte(`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"fleet.journal.r","seq":4,"hdrs":"` + hdr + `","data":"e30=","time":"2026-01-01T00:00:00Z"}}`))
	f.Add([]byte(`{"error":{"code":404,"err_code":10037,"description":"no message found"}}`))
	f.Add([]byte(`{"error":{"code":503,"err_code":10008,"description":"JetStream cluster not available"}}`))
	f.Add([]byte(`{"message":{"seq":1,"hdrs":"TkFUUy8xLjA="}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := natsbus.DecodeMsgGet(data)
		if (err == nil) == (m == nil) {
			t.Fatalf("decoding %q: message %v, error %v; want exactly one", data, m, err)
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) && !bytes.Contains(data, []byte("10037")) {
			t.Fatalf("decoding %q: ErrMsgNotFound from an answer without its code", data)
		}
	})
}
