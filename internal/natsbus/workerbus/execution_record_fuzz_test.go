package workerbus

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeExecutionRecord: any bytes in the claims stream decode to a
// record naming a calls-stream sequence, or to an error; never a panic,
// and a record decodes to what was encoded.
func FuzzDecodeExecutionRecord(f *testing.F) {
	f.Add([]byte(`{"v":1,"calls_seq":7,"worker":"w1","at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"v":1,"calls_seq":0}`))
	f.Add([]byte(`{"calls_seq":1,"extra":true}`))
	f.Add([]byte(`{"calls_seq":1}{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeExecutionRecord(data)
		if err != nil {
			return
		}
		if rec.CallsSeq == 0 {
			t.Fatalf("decoded a record without a calls sequence: %q", data)
		}
		again, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeExecutionRecord(again)
		if err != nil || back.CallsSeq != rec.CallsSeq || back.Worker != rec.Worker {
			t.Fatalf("round trip of %q: %+v, %v", data, back, err)
		}
	})
}
