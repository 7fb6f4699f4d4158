package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
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
