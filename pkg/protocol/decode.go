package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"

	fastjson "github.com/segmentio/encoding/json"
)

// DefaultMaxMessageBytes is the decode limit used when a caller passes 0:
// NATS's default max_payload, 1 MiB.
const DefaultMaxMessageBytes = 1 << 20

// message is implemented by every wire message.
type message interface {
	Validate() error
}

// decode parses data into m strictly: one JSON object, no unknown fields, no
// trailing data, at most limit bytes (0 means [DefaultMaxMessageBytes]), and
// then m's own rules.
//
// A message is first decoded by segmentio/encoding/json, which decodes
// the same values as encoding/json several times faster. Should that
// fail, m is decoded again from scratch by encoding/json's strict
// decoder, so that a refused message gets exactly the error (and m the
// partial value) encoding/json gives.
func decode(data []byte, limit int, m message) error {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	if len(data) > limit {
		return &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("%d bytes, limit %d", len(data), limit)}
	}
	if len(bytes.TrimSpace(data)) == 0 || bytes.TrimSpace(data)[0] != '{' {
		return &Error{Code: CodeMalformed, Msg: "not a JSON object"}
	}
	if decodeFast(data, m) {
		return m.Validate()
	}
	reflect.ValueOf(m).Elem().SetZero()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return &Error{Code: CodeMalformed, Msg: describeJSONError(err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{Code: CodeMalformed, Msg: "trailing data after the JSON object"}
	}
	return m.Validate()
}

// decodeFast decodes data into m with segmentio/encoding/json: true when
// data is one JSON value that decodes into m with no unknown field,
// followed by nothing but JSON whitespace. Strings, numbers and raw
// messages are copied, never kept pointing into data.
func decodeFast(data []byte, m message) bool {
	rest, err := fastjson.Parse(data, m, fastjson.DisallowUnknownFields)
	return err == nil && len(rest) == 0
}

// describeJSONError says what is wrong without quoting the input.
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q: want %s", clip(typ.Field), typ.Type)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	default:
		// encoding/json's other messages name fields (unknown field "x"),
		// never values; clip them anyway.
		return clip(err.Error())
	}
}

// DecodeCall decodes and validates a [Call].
func DecodeCall(data []byte, limit int) (Call, error) {
	return decodePooled[Call](&calls, data, limit)
}

// DecodeResult decodes and validates a [Result].
func DecodeResult(data []byte, limit int) (Result, error) {
	return decodePooled[Result](&results, data, limit)
}

// Every tool call's call and result is decoded (and encoded) into a
// value of one of these pools, which is copied out and cleared: a
// decoder holds its target through an interface, which would otherwise
// cost an allocation per message.
var (
	calls   = sync.Pool{New: func() any { return new(Call) }}
	results = sync.Pool{New: func() any { return new(Result) }}
)

// decodePooled is decode into a value of pool, whose copy it returns.
func decodePooled[T any, M interface {
	*T
	message
}](pool *sync.Pool, data []byte, limit int) (T, error) {
	m := pool.Get().(M)
	err := decode(data, limit, m)
	v := *m
	var zero T
	*m = zero
	pool.Put(m)
	return v, err
}

// DecodeStarted decodes and validates a [Started].
func DecodeStarted(data []byte, limit int) (Started, error) {
	var m Started
	err := decode(data, limit, &m)
	return m, err
}

// DecodeCancel decodes and validates a [Cancel].
func DecodeCancel(data []byte, limit int) (Cancel, error) {
	var m Cancel
	err := decode(data, limit, &m)
	return m, err
}

// DecodeApprovalRequest decodes and validates an [ApprovalRequest].
func DecodeApprovalRequest(data []byte, limit int) (ApprovalRequest, error) {
	var m ApprovalRequest
	err := decode(data, limit, &m)
	return m, err
}

// DecodeApprovalDecision decodes and validates an [ApprovalDecision].
func DecodeApprovalDecision(data []byte, limit int) (ApprovalDecision, error) {
	var m ApprovalDecision
	err := decode(data, limit, &m)
	return m, err
}

// DecodeToolSpec decodes and validates a [ToolSpec].
func DecodeToolSpec(data []byte, limit int) (ToolSpec, error) {
	var m ToolSpec
	err := decode(data, limit, &m)
	return m, err
}

// Encode marshals a message. Messages built by this package always encode.
//
// The messages every tool call sends (a call, its result, a started
// notice, a cancel) are marshalled by segmentio/encoding/json, which
// gives them the bytes encoding/json gives, faster; the others by
// encoding/json, whose omitzero the other does not know.
func Encode(m message) ([]byte, error) {
	switch m := m.(type) {
	case *Call:
		return encodeCall(m)
	case *Result:
		return encodeResult(m)
	case *Started, *Cancel:
		return fastjson.Marshal(m)
	}
	return json.Marshal(m)
}

// encodeCall is [Encode] of a call, marshalled from a copy in the pool
// (c itself is only read, and need not be on the heap).
func encodeCall(c *Call) ([]byte, error) {
	wire := calls.Get().(*Call)
	*wire = *c
	if wire.Attempt == 0 {
		// Workers of earlier releases require it (Call.Attempt).
		wire.Attempt = 1
	}
	data, err := fastjson.Marshal(wire)
	*wire = Call{}
	calls.Put(wire)
	return data, err
}

// encodeResult is [Encode] of a result, marshalled from a copy in the
// pool (r itself is only read, and need not be on the heap).
func encodeResult(r *Result) ([]byte, error) {
	wire := results.Get().(*Result)
	*wire = *r
	data, err := fastjson.Marshal(wire)
	*wire = Result{}
	results.Put(wire)
	return data, err
}
