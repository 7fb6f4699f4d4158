package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func seedMessages(f *testing.F) {
	c := validCall()
	b, _ := Encode(&c)
	f.Add(b)
	f.Add([]byte(`{"v":1,"run_id":"r","call_key":"k","outcome":"ok","output":"x","duration_ms":3}`))
	f.Add([]byte(`{"v":1,"run_id":"r","call_key":"k"}`))
	f.Add([]byte(`{"digest":"d","approved":true,"reason":"ok","approver":"ann"}`))
	f.Add([]byte(`{"v":1,"name":"echo","description":"","parameters":{"type":"object"},"schema_digest":"x"}`))
	f.Add([]byte(`{"v":1,"run_id":"r","call_key":"k","round":1,"tool":"t","arguments":{},"digest":"d","deadline":"2026-01-01T00:00:00Z","decision_subject":"s"}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"v":1,"v":1}`))
	f.Add([]byte("\x00\xff{"))
}

// FuzzDecode feeds the same bytes to every decoder: none may panic, and any
// message a decoder accepts must re-encode and decode to an accepted message.
func FuzzDecode(f *testing.F) {
	seedMessages(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(name string, m message, err error) {
			if err != nil {
				if _, ok := err.(*Error); !ok {
					t.Fatalf("%s: error of type %T, want *protocol.Error", name, err)
				}
				return
			}
			if err := m.Validate(); err != nil {
				t.Fatalf("%s: accepted message fails Validate: %v", name, err)
			}
			if _, err := Encode(m); err != nil {
				t.Fatalf("%s: accepted message does not encode: %v", name, err)
			}
		}
		c, err := DecodeCall(data, 4096)
		check("call", &c, err)
		r, err := DecodeResult(data, 4096)
		check("result", &r, err)
		p, err := DecodeStarted(data, 4096)
		check("progress", &p, err)
		x, err := DecodeCancel(data, 4096)
		check("cancel", &x, err)
		a, err := DecodeApprovalRequest(data, 4096)
		check("approval request", &a, err)
		d, err := DecodeApprovalDecision(data, 4096)
		check("approval decision", &d, err)
		s, err := DecodeToolSpec(data, 4096)
		check("tool spec", &s, err)
	})
}

// FuzzDigest checks that the digest ignores formatting and depends on content.
func FuzzDigest(f *testing.F) {
	f.Add(`{"a":1,"b":[true,null,"x"]}`, "k")
	f.Add(`{}`, "k2")
	f.Add(`{"x":"<&>\u2028"}`, "k")
	f.Fuzz(func(t *testing.T, args, key string) {
		d1, err := Digest("run", CallKey(key), "tool", []byte(args))
		if err != nil {
			return
		}
		var v any
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			t.Fatalf("digest accepted invalid JSON %q", args)
		}
		indented, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return
		}
		canon, _ := Canonical([]byte(args))
		canon2, err := Canonical(indented)
		if err != nil {
			t.Fatalf("canonical of re-encoded doc: %v", err)
		}
		// Re-encoding through float64 may change number spellings; compare
		// only when numbers survived.
		if string(canon) == string(canon2) {
			d2, _ := Digest("run", CallKey(key), "tool", indented)
			if d1 != d2 {
				t.Fatalf("formatting changed the digest")
			}
		}
		if d3, _ := Digest("run", CallKey(key+"x"), "tool", []byte(args)); d3 == d1 {
			t.Fatalf("different call key, same digest")
		}
	})
}

// FuzzTruncate checks the truncation invariants against any input.
func FuzzTruncate(f *testing.F) {
	f.Add("hello world", 5)
	f.Add(strings.Repeat("日本", 40), 13)
	f.Add("a\xffb", 2)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		got, cut := Truncate(s, max)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 output")
		}
		if n := utf8.RuneCountInString(got); n > max {
			t.Fatalf("output has %d runes, max %d", n, max)
		}
		if !cut {
			if got != toValidUTF8(s) {
				t.Fatalf("uncut output differs from input")
			}
			return
		}
		body := strings.TrimSuffix(got, TruncationMarker)
		if !strings.HasPrefix(toValidUTF8(s), body) {
			t.Fatalf("cut output is not a prefix of the input")
		}
	})
}
