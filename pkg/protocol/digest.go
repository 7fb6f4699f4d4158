package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"

	fastjson "github.com/segmentio/encoding/json"
)

// Canonical returns the canonical form of a JSON document: object keys
// sorted, no insignificant white space, no HTML escaping, numbers kept as
// written. Two documents that differ only in key order or spacing have the
// same canonical form.
func Canonical(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &Error{Code: CodeMalformed, Msg: describeJSONError(err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &Error{Code: CodeMalformed, Msg: "trailing data after the JSON document"}
	}
	return CanonicalValue(v)
}

// CanonicalValue is [Canonical] for a document already decoded by
// encoding/json into an any with UseNumber (as schema.ParseObject decodes
// arguments): for such a v decoded from doc, CanonicalValue(v) equals
// Canonical(doc), without decoding doc again.
//
// It is encoded by segmentio/encoding/json, which gives such a document
// the bytes encoding/json gives it, several times faster; should that
// fail, by encoding/json, whose error is returned.
func CanonicalValue(v any) ([]byte, error) {
	if !plainJSON(v) {
		return canonicalEncoded(v)
	}
	buf := canonicalBufs.Get().(*[]byte)
	out, err := fastjson.Append((*buf)[:0], v, fastjson.SortMapKeys)
	if err == nil {
		canonical := bytes.Clone(out)
		if cap(out) <= maxPooledCanonical {
			*buf = out
			canonicalBufs.Put(buf)
		}
		return canonical, nil
	}
	canonicalBufs.Put(buf)
	return canonicalEncoded(v)
}

// plainJSON reports whether v holds only what decoding JSON with
// UseNumber gives — objects, arrays, strings, valid numbers, booleans and
// nulls — which segmentio/encoding/json encodes as encoding/json does
// (it would write an invalid json.Number that encoding/json refuses).
func plainJSON(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if !plainJSON(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range v {
			if !plainJSON(e) {
				return false
			}
		}
		return true
	case json.Number:
		return validNumber(string(v))
	case string, bool, nil:
		return true
	}
	return false
}

// validNumber reports whether s is a JSON number (RFC 8259, section 6),
// as encoding/json's encoder checks a json.Number.
func validNumber(s string) bool {
	s, _ = strings.CutPrefix(s, "-")
	switch {
	case s == "":
		return false
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		s = skipDigits(s[1:])
	default:
		return false
	}
	if len(s) >= 2 && s[0] == '.' && '0' <= s[1] && s[1] <= '9' {
		s = skipDigits(s[2:])
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s[0] == '+' || s[0] == '-' {
			s = s[1:]
			if s == "" {
				return false
			}
		}
		s = skipDigits(s)
	}
	return s == ""
}

// skipDigits returns s after its leading decimal digits.
func skipDigits(s string) string {
	for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
		s = s[1:]
	}
	return s
}

// canonicalBufs hold CanonicalValue's encoding buffers, up to
// maxPooledCanonical bytes each.
var canonicalBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledCanonical = 64 << 10

// canonicalEncoded is [CanonicalValue] by encoding/json.
func canonicalEncoded(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, &Error{Code: CodeMalformed, Msg: clip(err.Error())}
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Digest binds an approval to one call: the hex SHA-256 of the canonical JSON
// of {"arguments", "call_key", "run_id", "tool"}. The same call with other
// arguments, or the same arguments in another call, has another digest.
func Digest(run RunID, key CallKey, tool ToolName, arguments []byte) (string, error) {
	args, err := Canonical(arguments)
	if err != nil {
		return "", err
	}
	doc, _ := json.Marshal(struct {
		Arguments json.RawMessage `json:"arguments"`
		CallKey   CallKey         `json:"call_key"`
		RunID     RunID           `json:"run_id"`
		Tool      ToolName        `json:"tool"`
	}{args, key, run, tool})
	canon, err := Canonical(doc)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// SchemaDigest is the hex SHA-256 of a schema's canonical JSON, so two
// workers can tell whether they agree on a tool's schema.
func SchemaDigest(schema []byte) (string, error) {
	canon, err := Canonical(schema)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// ArgsDigest is a short fingerprint of arguments for logs, which never carry
// argument values: the first 16 hex digits of the SHA-256 of their canonical
// form, or "invalid" when they are not JSON.
func ArgsDigest(arguments []byte) string {
	canon, err := Canonical(arguments)
	if err != nil {
		return "invalid"
	}
	return CanonicalArgsDigest(canon)
}

// CanonicalArgsDigest is [ArgsDigest] for arguments already in canonical
// form (as [Canonical] or [CanonicalValue] return them), which it does not
// canonicalise again.
func CanonicalArgsDigest(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:8])
}
