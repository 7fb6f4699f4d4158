package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func batchResult(run RunID, key CallKey) Result {
	return Result{V: 1, RunID: run, CallKey: key, Outcome: OutcomeOK, Output: "out-" + string(key), DurationMS: 1, Worker: "w", Attempt: 1}
}

func encodedResults(t testing.TB, rs ...Result) [][]byte {
	t.Helper()
	out := make([][]byte, len(rs))
	for i := range rs {
		b, err := EncodeResultWithin(&rs[i], DefaultMaxMessageBytes)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func TestResultBatchRoundTrip(t *testing.T) {
	rs := []Result{batchResult("run1", "k1"), batchResult("run1", "k2"), batchResult("run1", "k3")}
	enc := encodedResults(t, rs...)
	size := 0
	for _, e := range enc {
		size += len(e)
	}
	data := EncodeResultBatch("run1", enc)
	if got := ResultBatchBytes("run1", len(enc), size); got != len(data) {
		t.Fatalf("ResultBatchBytes = %d, body is %d bytes", got, len(data))
	}
	b, err := DecodeResultBatch(data, 0)
	if err != nil {
		t.Fatalf("DecodeResultBatch: %v", err)
	}
	if b.RunID != "run1" || len(b.Results) != 3 {
		t.Fatalf("batch = %+v", b)
	}
	for i, r := range b.Results {
		if r != rs[i] {
			t.Fatalf("result %d = %+v, want %+v", i, r, rs[i])
		}
	}
	// A batch is not a result, nor a result a batch.
	if _, err := DecodeResult(data, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("DecodeResult of a batch = %v, want malformed", err)
	}
	if _, err := DecodeResultBatch(enc[0], 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("DecodeResultBatch of a result = %v, want malformed", err)
	}
}

func TestDecodeResultBatchRejects(t *testing.T) {
	body := func(run string, rs ...Result) []byte {
		return EncodeResultBatch(RunID(run), encodedResults(t, rs...))
	}
	good := body("run1", batchResult("run1", "k1"), batchResult("run1", "k2"))
	many := make([]Result, MaxResultBatch+1)
	for i := range many {
		many[i] = batchResult("run1", CallKey("k"+strings.Repeat("x", i%60)+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	tests := []struct {
		name  string
		data  []byte
		limit int
		want  error
	}{
		{"too large", good, 20, ErrTooLarge},
		{"empty", nil, 0, ErrMalformed},
		{"no results", []byte(`{"v":1,"run_id":"run1","results":[]}`), 0, ErrMissingField},
		{"null results", []byte(`{"v":1,"run_id":"run1","results":null}`), 0, ErrMissingField},
		{"over count", body("run1", many...), 0, ErrInvalidField},
		{"mixed runs", body("run1", batchResult("run1", "k1"), batchResult("run2", "k2")), 0, ErrInvalidField},
		{"another run", body("run1", batchResult("run2", "k1")), 0, ErrInvalidField},
		{"key twice", body("run1", batchResult("run1", "k1"), batchResult("run1", "k1")), 0, ErrInvalidField},
		{"trailing data", append(append([]byte{}, good...), ` {}`...), 0, ErrMalformed},
		{"unknown field", []byte(strings.Replace(string(good), `"run_id"`, `"x":1,"run_id"`, 1)), 0, ErrMalformed},
		{"unknown field in a result", []byte(strings.Replace(string(good), `"call_key"`, `"x":1,"call_key"`, 1)), 0, ErrMalformed},
		{"invalid result", []byte(strings.Replace(string(good), `"outcome":"ok"`, `"outcome":"maybe"`, 1)), 0, ErrInvalidField},
		{"version 2", []byte(strings.Replace(string(good), `{"v":1`, `{"v":2`, 1)), 0, ErrVersion},
		{"bad run id", body("a.b", batchResult("a.b", "k1")), 0, ErrInvalidField},
		{"array", []byte(`[` + string(good) + `]`), 0, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeResultBatch(tt.data, tt.limit)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestResultBatchMsgID(t *testing.T) {
	a := ResultBatchMsgID("echo", []CallKey{"k1", "k2", "k3"})
	if b := ResultBatchMsgID("echo", []CallKey{"k3", "k1", "k2"}); a != b {
		t.Fatalf("order changed the id: %s, %s", a, b)
	}
	for _, other := range []string{
		ResultBatchMsgID("echo", []CallKey{"k1", "k2"}),
		ResultBatchMsgID("other", []CallKey{"k1", "k2", "k3"}),
		ResultBatchMsgID("echo", []CallKey{"k1", "k2k3"}),
		ResultMsgID("echo", "k1"),
	} {
		if other == a {
			t.Fatalf("different batch, same id %s", a)
		}
	}
}

// FuzzDecodeResultBatch checks that the decoder never panics, that what it
// accepts keeps the batch's rules, and that an accepted batch rebuilt from
// its results decodes to the same batch.
func FuzzDecodeResultBatch(f *testing.F) {
	r1, r2 := batchResult("run1", "k1"), batchResult("run1", "k2")
	e1, _ := Encode(&r1)
	e2, _ := Encode(&r2)
	f.Add(EncodeResultBatch("run1", [][]byte{e1, e2}))
	f.Add(EncodeResultBatch("run1", [][]byte{e1, e1}))
	f.Add(EncodeResultBatch("run2", [][]byte{e1}))
	f.Add([]byte(`{"v":1,"run_id":"r","results":[]}`))
	f.Add([]byte(`{"v":1,"run_id":"r","results":[{"v":1,"run_id":"r","call_key":"k","outcome":"ok","duration_ms":0}]}`))
	f.Add([]byte(`{"v":1,"run_id":"r","results":[{}]} x`))
	f.Add(e1)
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeResultBatch(data, 8192)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T, want *protocol.Error", err)
			}
			return
		}
		if len(b.Results) == 0 || len(b.Results) > MaxResultBatch {
			t.Fatalf("accepted %d results", len(b.Results))
		}
		keys := map[CallKey]bool{}
		enc := make([][]byte, len(b.Results))
		for i := range b.Results {
			r := &b.Results[i]
			if r.Validate() != nil || r.RunID != b.RunID || keys[r.CallKey] {
				t.Fatalf("accepted result %d: %+v of batch run %s", i, r, b.RunID)
			}
			keys[r.CallKey] = true
			if enc[i], err = Encode(r); err != nil {
				t.Fatal(err)
			}
		}
		again, err := DecodeResultBatch(EncodeResultBatch(b.RunID, enc), 0)
		if err != nil {
			t.Fatalf("rebuilt batch refused: %v", err)
		}
		a, _ := json.Marshal(again)
		o, _ := json.Marshal(b)
		if string(a) != string(o) {
			t.Fatalf("rebuilt batch differs:\n%s\n%s", a, o)
		}
	})
}

func TestResultBatchLimit(t *testing.T) {
	for _, tt := range []struct {
		header string
		want   int
		ok     bool
	}{
		{"", 0, false}, {"1", 0, false}, {"1023", 0, false}, {"1024", 1024, true}, {"1048576", 1 << 20, true},
		{"01048576", 0, false}, {"+2048", 0, false}, {"-2048", 0, false}, {" 2048", 0, false}, {"2048 ", 0, false},
		{"2147483647", 2147483647, true}, {"2147483648", 0, false}, {"99999999999", 0, false}, {"yes", 0, false},
	} {
		if got, ok := ResultBatchLimit(tt.header); got != tt.want || ok != tt.ok {
			t.Errorf("ResultBatchLimit(%q) = %d, %v; want %d, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
	if got, ok := ResultBatchLimit(ResultBatchHeader(DefaultMaxMessageBytes)); !ok || got != DefaultMaxMessageBytes {
		t.Errorf("the header of the default limit reads %d, %v", got, ok)
	}
}

// FuzzResultBatchLimit: an accepted header is a limit of at least
// MinResultBatchBytes, spelled as ResultBatchHeader spells it.
func FuzzResultBatchLimit(f *testing.F) {
	for _, s := range []string{"", "1024", "1048576", "0", "01", "2147483648", "1e6", "٣٣٣٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		n, ok := ResultBatchLimit(header)
		if !ok {
			if n != 0 {
				t.Fatalf("refused %q with limit %d", header, n)
			}
			return
		}
		if n < MinResultBatchBytes || ResultBatchHeader(n) != header {
			t.Fatalf("accepted %q as %d", header, n)
		}
	})
}

func TestDecodeStoredResults(t *testing.T) {
	r1, r2 := batchResult("run1", "k1"), batchResult("run1", "k2")
	e1, _ := Encode(&r1)
	e2, _ := Encode(&r2)
	batch := EncodeResultBatch("run1", [][]byte{e1, e2})
	for _, tc := range []struct {
		name   string
		header string
		data   []byte
		keys   []CallKey
	}{
		{"one result", "", e1, []CallKey{"k1"}},
		{"a batch", ResultBatchStored, batch, []CallKey{"k1", "k2"}},
		{"a batch not marked", "", batch, nil},
		{"one result marked a batch", ResultBatchStored, e1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeStoredResults(tc.header, tc.data, 0)
			if tc.keys == nil {
				if err == nil {
					t.Fatalf("decoded %d results, want an error", len(got))
				}
				return
			}
			if err != nil || len(got) != len(tc.keys) {
				t.Fatalf("got %d results, %v; want %v", len(got), err, tc.keys)
			}
			for i, k := range tc.keys {
				if got[i].CallKey != k {
					t.Fatalf("result %d is %s, want %s", i, got[i].CallKey, k)
				}
			}
		})
	}
}

// TestResultBatchHeadBytes: the head's size, counted without building it
// for a run id that is a token, is the size of the head built, for any
// run id.
func TestResultBatchHeadBytes(t *testing.T) {
	for _, run := range []RunID{NewRunID(), "r", "run-1_A", RunID(strings.Repeat("x", 64)), "", "a<b&c", `q"uote`, "é", "tab\there"} {
		if got, want := resultBatchHeadBytes(run), len(resultBatchHead(run)); got != want {
			t.Errorf("resultBatchHeadBytes(%q) = %d, want %d", run, got, want)
		}
	}
}
