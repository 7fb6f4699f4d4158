package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	fastjson "github.com/segmentio/encoding/json"
)

// decodeNumbers decodes doc as schema.ParseObject does.
func decodeNumbers(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func TestCanonicalValueEqualsCanonical(t *testing.T) {
	for _, doc := range []string{
		`{}`,
		`{"b": 2, "a": 1}`,
		`{"n": 1.50, "big": 12345678901234567890, "exp": 1e400}`,
		`{"html": "<a href=\"x\">&</a>", "uni": "é\u2028"}`,
		`{"nested": {"z": [3, {"y": null, "x": true}], "a": []}}`,
		`[1, "two", null]`,
		`"just a string"`,
	} {
		t.Run(doc, func(t *testing.T) {
			want, err := Canonical([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			v, err := decodeNumbers([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			got, err := CanonicalValue(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("CanonicalValue = %s, Canonical = %s", got, want)
			}
			if d, w := CanonicalArgsDigest(got), ArgsDigest([]byte(doc)); d != w {
				t.Errorf("CanonicalArgsDigest = %s, ArgsDigest = %s", d, w)
			}
		})
	}
}

// FuzzCanonicalValue checks that canonicalising a decoded document gives
// what Canonical gives for its text.
func FuzzCanonicalValue(f *testing.F) {
	for _, s := range []string{`{}`, `{"b":2,"a":[1.0,"x"]}`, `{"a":{"a":{"a":null}}}`, `1e999`, `{"a":"\u003c"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		want, err := Canonical(doc)
		if err != nil {
			return
		}
		v, err := decodeNumbers(doc)
		if err != nil {
			t.Fatalf("Canonical accepted what the decoder refuses: %v", err)
		}
		got, err := CanonicalValue(v)
		if err != nil {
			t.Fatalf("CanonicalValue: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("CanonicalValue = %s, Canonical = %s", got, want)
		}
		if d, w := CanonicalArgsDigest(got), ArgsDigest(doc); d != w {
			t.Fatalf("CanonicalArgsDigest = %s, ArgsDigest = %s", d, w)
		}
	})
}

// checkCanonicalMatchesEncoder fails t unless CanonicalValue gives v the
// bytes, or the error, encoding/json gives it (canonicalEncoded, what
// CanonicalValue was before it tried segmentio/encoding/json first).
func checkCanonicalMatchesEncoder(t *testing.T, v any) {
	t.Helper()
	got, gotErr := CanonicalValue(v)
	want, wantErr := canonicalEncoded(v)
	if !bytes.Equal(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("CanonicalValue(%#v) = %q, %v; encoding/json gives %q, %v", v, got, gotErr, want, wantErr)
	}
}

// FuzzCanonicalValueMatchesEncoder compares CanonicalValue with
// encoding/json's encoder: on doc decoded as schema.ParseObject decodes
// arguments (segmentio/encoding/json, numbers kept as written) and as
// encoding/json decodes it, and on s and f in every place a value can
// be — as a key, a string, a number (json.Number(s), valid or not), a
// float.
func FuzzCanonicalValueMatchesEncoder(f *testing.F) {
	for _, s := range []string{`{}`, `{"b":2,"a":[1.0,"x"]}`, `{"html":"<a href=\"x\">&</a>","u":"\u2028\u2029\u0000\u007f"}`,
		`{"n":1.50,"big":12345678901234567890,"exp":1e400,"neg":-0}`, "{\"bad\":\"\xff\xfe\"}", `[1,"two",null,true]`, `"s"`} {
		f.Add([]byte(s), s, 1.5)
	}
	f.Add([]byte(`{}`), "\xed\xa0\x80 <>& \t\b\f\r\n\x1f é 😀", 1e21)
	f.Add([]byte(`{}`), "-01", 1e-7)
	f.Add([]byte(`{}`), "1e", math.Inf(1))
	f.Add([]byte(`{}`), "", math.NaN())
	f.Fuzz(func(t *testing.T, doc []byte, s string, x float64) {
		var fast any
		if rest, err := fastjson.Parse(doc, &fast, fastjson.UseNumber); err == nil && len(rest) == 0 {
			checkCanonicalMatchesEncoder(t, fast)
		}
		if v, err := decodeNumbers(doc); err == nil {
			checkCanonicalMatchesEncoder(t, v)
		}
		checkCanonicalMatchesEncoder(t, map[string]any{s: []any{s, json.Number(s), x, true, nil, map[string]any{}, []any{}}})
		checkCanonicalMatchesEncoder(t, json.Number(s))
		checkCanonicalMatchesEncoder(t, x)
	})
}
