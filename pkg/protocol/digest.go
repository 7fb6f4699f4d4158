package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
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
func CanonicalValue(v any) ([]byte, error) {
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
