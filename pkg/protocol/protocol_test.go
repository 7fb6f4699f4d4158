package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func validCall() Call {
	return Call{
		V: 1, RunID: "run1", Round: 1, CallKey: "key1", CallID: "call_1", Tool: "echo",
		Arguments: json.RawMessage(`{"text":"hi"}`), Deadline: time.Unix(1700000000, 0).UTC(), Attempt: 1,
	}
}

func TestDecodeCallRoundTrip(t *testing.T) {
	want := validCall()
	data, err := Encode(&want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCall(data, 0)
	if err != nil {
		t.Fatalf("DecodeCall: %v", err)
	}
	if got.RunID != want.RunID || got.CallKey != want.CallKey || !got.Deadline.Equal(want.Deadline) || string(got.Arguments) != string(want.Arguments) {
		t.Fatalf("round trip = %+v, want %+v", got, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Encode(ptr(validCall()))
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	tests := []struct {
		name  string
		data  []byte
		limit int
		want  error
		field string
	}{
		{"too large", good, 10, ErrTooLarge, ""},
		{"empty", nil, 0, ErrMalformed, ""},
		{"array", []byte(`[1]`), 0, ErrMalformed, ""},
		{"not json", []byte(`{nope`), 0, ErrMalformed, ""},
		{"trailing data", append(append([]byte{}, good...), []byte(` {}`)...), 0, ErrMalformed, ""},
		{"unknown field", mutate(func(m map[string]any) { m["extra"] = 1 }), 0, ErrMalformed, ""},
		{"wrong type", mutate(func(m map[string]any) { m["round"] = "one" }), 0, ErrMalformed, ""},
		{"version 2", mutate(func(m map[string]any) { m["v"] = 2 }), 0, ErrVersion, "v"},
		{"no version", mutate(func(m map[string]any) { delete(m, "v") }), 0, ErrMissingField, "v"},
		{"no run id", mutate(func(m map[string]any) { delete(m, "run_id") }), 0, ErrMissingField, "run_id"},
		{"bad run id", mutate(func(m map[string]any) { m["run_id"] = "a.b" }), 0, ErrInvalidField, "run_id"},
		{"wildcard tool", mutate(func(m map[string]any) { m["tool"] = ">" }), 0, ErrInvalidField, "tool"},
		{"no arguments", mutate(func(m map[string]any) { delete(m, "arguments") }), 0, ErrMissingField, "arguments"},
		{"no deadline", mutate(func(m map[string]any) { delete(m, "deadline") }), 0, ErrMissingField, "deadline"},
		{"negative attempt", mutate(func(m map[string]any) { m["attempt"] = -1 }), 0, ErrInvalidField, "attempt"},
		{"negative output bound", mutate(func(m map[string]any) { m["max_output_chars"] = -1 }), 0, ErrInvalidField, "max_output_chars"},
		{"huge call id", mutate(func(m map[string]any) { m["call_id"] = strings.Repeat("x", 300) }), 0, ErrInvalidField, "call_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCall(tt.data, tt.limit)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Field != tt.field {
				t.Fatalf("err = %#v, want field %q", err, tt.field)
			}
		})
	}
}

func TestDecodeErrorsDoNotQuoteInput(t *testing.T) {
	const canary = "SECRET-CANARY-7f3a"
	inputs := []string{
		`{"v":1,"run_id":"` + canary + `"}`,
		`{"` + canary + `":1}`,
		`{"v":"` + canary + `"}`,
		`{"v":1,"tool":"` + canary + `.x"}`,
	}
	for _, in := range inputs {
		_, err := DecodeCall([]byte(in), 0)
		if err == nil {
			t.Fatalf("DecodeCall(%s) succeeded", in)
		}
		// Field names of unknown fields are clipped but may appear; values never.
		if strings.Contains(err.Error(), canary) && !strings.Contains(in, `"`+canary+`":`) {
			t.Errorf("error quotes input value: %v", err)
		}
	}
}

func TestDecisionApprovedRequired(t *testing.T) {
	if _, err := DecodeApprovalDecision([]byte(`{"digest":"abc"}`), 0); !errors.Is(err, ErrMissingField) {
		t.Fatalf("decision without approved: err = %v, want missing field", err)
	}
	if _, err := DecodeApprovalDecision([]byte(`{"digest":"abc","approved":"yes"}`), 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf(`approved:"yes": err = %v, want malformed`, err)
	}
	d, err := DecodeApprovalDecision([]byte(`{"digest":"abc","approved":false,"reason":"no"}`), 0)
	if err != nil || *d.Approved {
		t.Fatalf("deny decision = %+v, %v", d, err)
	}
	if _, err := DecodeApprovalDecision([]byte(`{"v":2,"digest":"abc","approved":true}`), 0); !errors.Is(err, ErrVersion) {
		t.Fatalf("v2 decision: err = %v, want version error", err)
	}
}

func TestResultOutcomeMustBeKnown(t *testing.T) {
	_, err := DecodeResult([]byte(`{"v":1,"run_id":"r","call_key":"k","outcome":"approved","duration_ms":1}`), 0)
	if !errors.Is(err, ErrInvalidField) {
		t.Fatalf("err = %v, want invalid field", err)
	}
}

func TestSubjects(t *testing.T) {
	var s Subjects // zero value: default prefix
	if got, _ := s.Call("calculator", ClassBatch, "acme"); got != "fleet.call.calculator.batch.acme" {
		t.Fatalf("Call = %q", got)
	}
	if tool, class, client, ok := s.ParseCall("fleet.call.calculator.batch.acme"); !ok || tool != "calculator" || class != ClassBatch || client != "acme" {
		t.Fatalf("ParseCall = %q %q %q %v", tool, class, client, ok)
	}
	for _, bad := range []string{"fleet.call.calculator", "fleet.call.calculator.urgent.acme", "fleet.call.calculator.batch.acme.x", "other.call.c.batch.a"} {
		if _, _, _, ok := s.ParseCall(bad); ok {
			t.Errorf("ParseCall(%q) ok, want refused", bad)
		}
	}
	if got, _ := s.CallsOf("calculator", ClassInteractive); got != "fleet.call.calculator.interactive.*" {
		t.Fatalf("CallsOf = %q", got)
	}
	if got, _ := s.ClassConsumer("calculator", ClassBatch); got != "batch_calculator" {
		t.Fatalf("ClassConsumer(batch) = %q", got)
	}
	if got, _ := s.ClassConsumer("calculator", ClassInteractive); got != "tool_calculator" {
		t.Fatalf("ClassConsumer(interactive) = %q", got)
	}
	if _, err := s.Call("calculator", "urgent", "acme"); !errors.Is(err, ErrInvalidField) {
		t.Fatalf("Call(class urgent) err = %v, want invalid", err)
	}
	if got, _ := s.Cancel("r1", "k1"); got != "fleet.cancel.r1.k1" {
		t.Fatalf("Cancel = %q", got)
	}
	if got, _ := s.ApprovalDecision("r1", "k1"); got != "fleet.approval.decision.r1.k1" {
		t.Fatalf("ApprovalDecision = %q", got)
	}
	if s.CallsStream() != "FLEET_CALLS" || s.CatalogBucket() != "fleet_tools" {
		t.Fatalf("names = %q %q", s.CallsStream(), s.CatalogBucket())
	}
	for _, bad := range []string{"", "a.b", "*", ">", "a b", strings.Repeat("a", 65), "é"} {
		if _, err := s.Call(ToolName(bad), ClassInteractive, "acme"); !errors.Is(err, ErrInvalidField) {
			t.Errorf("Call(%q) err = %v, want invalid", bad, err)
		}
	}
	if _, err := NewSubjects("a.b"); err == nil {
		t.Fatal("NewSubjects(a.b) succeeded")
	}
	acme, _ := NewSubjects("acme")
	if acme.CallsStream() != "ACME_CALLS" || acme.Results() != "acme.result.>" {
		t.Fatalf("acme names = %q %q", acme.CallsStream(), acme.Results())
	}
}

func TestDigest(t *testing.T) {
	a, err := Digest("r", "k", "t", []byte(`{"b":1,"a":[1,2]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Digest("r", "k", "t", []byte("{ \"a\" : [1, 2], \"b\" : 1 }"))
	if a != b {
		t.Fatalf("key order or spacing changed the digest: %s != %s", a, b)
	}
	for name, args := range map[string]struct{ run, key, tool, args string }{
		"other args": {"r", "k", "t", `{"b":2,"a":[1,2]}`},
		"other key":  {"r", "k2", "t", `{"b":1,"a":[1,2]}`},
		"other run":  {"r2", "k", "t", `{"b":1,"a":[1,2]}`},
		"other tool": {"r", "k", "t2", `{"b":1,"a":[1,2]}`},
	} {
		d, _ := Digest(RunID(args.run), CallKey(args.key), ToolName(args.tool), []byte(args.args))
		if d == a {
			t.Errorf("%s: same digest", name)
		}
	}
	if _, err := Digest("r", "k", "t", []byte(`{`)); err == nil {
		t.Fatal("digest of invalid JSON succeeded")
	}
}

func TestCanonicalKeepsHTMLAndNumbers(t *testing.T) {
	got, err := Canonical([]byte(`{"z":"<a&b>","a":1.50,"m":12345678901234567890}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":1.50,"m":12345678901234567890,"z":"<a&b>"}`; string(got) != want {
		t.Fatalf("Canonical = %s, want %s", got, want)
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in      string
		max     int
		want    string
		trunced bool
	}{
		{"hello", 5, "hello", false},
		{"hello", 100, "hello", false},
		{strings.Repeat("a", 20), 15, "aaa" + TruncationMarker, true},
		{strings.Repeat("é", 20), 15, "ééé" + TruncationMarker, true},
		{"héllo wörld", 4, "héll", true},
		{"abc", 0, "", true},
		{"ab\xffc", 10, "ab\uFFFDc", false},
	}
	for _, tt := range tests {
		got, tr := Truncate(tt.in, tt.max)
		if got != tt.want || tr != tt.trunced {
			t.Errorf("Truncate(%q, %d) = %q, %v; want %q, %v", tt.in, tt.max, got, tr, tt.want, tt.trunced)
		}
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !ValidToken(id) || len(id) != 22 || seen[id] {
			t.Fatalf("NewID = %q (valid=%v, dup=%v)", id, ValidToken(id), seen[id])
		}
		seen[id] = true
	}
}

func ptr[T any](v T) *T { return &v }

// TestCallAttemptStaysOnTheWire: Call.Attempt is read by no one, but
// workers of earlier releases refuse a call without "attempt" >= 1 and
// coordinators of earlier releases send it. A call encoded without it
// carries 1; calls with it, with 0 and without it decode.
func TestCallAttemptStaysOnTheWire(t *testing.T) {
	c := Call{V: Version, RunID: "r", Round: 1, CallKey: "k", Tool: "t", Arguments: []byte(`{}`),
		Deadline: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	data, err := Encode(&c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"attempt":1`) {
		t.Fatalf("encoded %s, want \"attempt\":1 for workers of earlier releases", data)
	}
	if c.Attempt != 0 {
		t.Fatalf("Encode changed the caller's call: Attempt=%d", c.Attempt)
	}
	base := `{"v":1,"run_id":"r","round":1,"call_key":"k","tool":"t","arguments":{},"deadline":"2026-01-02T03:04:05Z"`
	for _, tail := range []string{`,"attempt":1}`, `,"attempt":3}`, `,"attempt":0}`, `}`} {
		if _, err := DecodeCall([]byte(base+tail), 0); err != nil {
			t.Errorf("DecodeCall(...%s): %v", tail, err)
		}
	}
}
