package httpapi_test

import (
	"encoding/json"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/internal/httpapi"
)

// FuzzDecoders: the request decoder never panics, accepts only what
// encoding/json accepts for the type, and refuses with a stable code; a
// reason that passes holds no control character and is valid UTF-8.
func FuzzDecoders(f *testing.F) {
	for _, s := range []string{`{"prompt": "hi"}`, `{"prompt": 1}`, `{"decision": "deny", "reason": "x"}`, `{} {}`, `{"sudo": 1}`, ``, `[`, "{\"reason\": \"a\\u0000\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var sub httpapi.SubmitRequest
		code, status := httpapi.DecodeJSON(data, &sub)
		if code == "" && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if code != "" && (status < 400 || status > 499) {
			t.Fatalf("refusal %s with status %d", code, status)
		}
		var dec httpapi.DecisionRequest
		if code, _ := httpapi.DecodeJSON(data, &dec); code == "" && httpapi.CheckText(dec.Reason) == "" {
			if !utf8.ValidString(dec.Reason) {
				t.Fatalf("reason %q passed, not UTF-8", dec.Reason)
			}
			for _, c := range dec.Reason {
				if unicode.IsControl(c) {
					t.Fatalf("reason %q passed with a control character", dec.Reason)
				}
			}
		}
	})
}

// FuzzEventID: a Last-Event-ID parses only as what the API sends — the
// word "result", or "<seq>.<n>" printed back as it was given (no sign, no
// space, no leading zero beyond "0") — or not at all; it never panics.
func FuzzEventID(f *testing.F) {
	for _, s := range []string{"1.0", "5.1", "result", "", ".", "1.", "-1.0", "01.0", "18446744073709551615.18446744073709551615", "1.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := httpapi.ParseEventID(s)
		if got != "" && got != s {
			t.Fatalf("%q parsed as %q", s, got)
		}
	})
}
