package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"testing"
)

// decodeReference is decode with encoding/json alone: a new strict
// decoder for every message. decode, which tries a faster decoder first,
// must agree with it on every input.
func decodeReference(data []byte, limit int, m message) error {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	if len(data) > limit {
		return &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("%d bytes, limit %d", len(data), limit)}
	}
	if len(bytes.TrimSpace(data)) == 0 || bytes.TrimSpace(data)[0] != '{' {
		return &Error{Code: CodeMalformed, Msg: "not a JSON object"}
	}
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

// decodeTargets are new values of every message type decode serves.
func decodeTargets() []func() message {
	return []func() message{
		func() message { return new(Call) },
		func() message { return new(Result) },
		func() message { return new(Started) },
		func() message { return new(CallStarted) },
		func() message { return new(Cancel) },
		func() message { return new(ApprovalRequest) },
		func() message { return new(ApprovalDecision) },
		func() message { return new(ToolSpec) },
		func() message { return new(ResultBatch) },
		func() message { return new(RunRequest) },
		func() message { return new(RunResponse) },
		func() message { return new(RunResult) },
		func() message { return new(ApprovalNote) },
	}
}

// checkSameDecode fails t unless decode and decodeReference give data the
// same value and the same error, for every message type.
func checkSameDecode(t *testing.T, data []byte, limit int) {
	t.Helper()
	if err := sameDecode(data, limit); err != nil {
		t.Fatal(err)
	}
}

// sameDecode says how decode and decodeReference differ on data, if they do.
func sameDecode(data []byte, limit int) error {
	for _, newMsg := range decodeTargets() {
		got, want := newMsg(), newMsg()
		gotErr, wantErr := decode(data, limit, got), decodeReference(data, limit, want)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || reflect.TypeOf(gotErr) != reflect.TypeOf(wantErr) {
			return fmt.Errorf("%T of %q: error %v, want %v", got, data, gotErr, wantErr)
		}
		var ge, we *Error
		if errors.As(gotErr, &ge) != errors.As(wantErr, &we) || (ge != nil && *ge != *we) {
			return fmt.Errorf("%T of %q: error %#v, want %#v", got, data, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("%T of %q: decoded %+v, want %+v", got, data, got, want)
		}
	}
	// The decoders that reuse their targets give what a new target gets.
	if err := samePooledDecode(data, limit, DecodeCall); err != nil {
		return err
	}
	return samePooledDecode(data, limit, DecodeResult)
}

// samePooledDecode says how decodeMsg, a decoder that reuses its
// targets, and decodeReference differ on data, if they do.
func samePooledDecode[T any, M interface {
	*T
	message
}](data []byte, limit int, decodeMsg func([]byte, int) (T, error)) error {
	got, gotErr := decodeMsg(data, limit)
	var want T
	wantErr := decodeReference(data, limit, M(&want))
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || reflect.TypeOf(gotErr) != reflect.TypeOf(wantErr) {
		return fmt.Errorf("pooled %T of %q: error %v, want %v", got, data, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("pooled %T of %q: decoded %+v, want %+v", got, data, got, want)
	}
	return nil
}

// diffInputs are messages that each rule of a strict decode refuses, and
// some it accepts.
func diffInputs() [][]byte {
	c := validCall()
	call, _ := Encode(&c)
	r := benchResult()
	result, _ := Encode(&r)
	return [][]byte{
		call, result,
		append(append([]byte(" \n\t"), call...), " \r\n"...),
		append(append([]byte{}, call...), call...),
		append(append([]byte{}, call...), "x"...),
		append(append([]byte{}, call...), "\v"...),
		append(append([]byte{}, call...), "\u00a0"...),
		append(append([]byte{}, call[:len(call)-1]...), `,"extra":1}`...),
		call[:len(call)/2],
		[]byte(`{"v":1,"run_id":"r","call_key":"k","outcome":"ok","duration_ms":3}`),
		[]byte(`{"V":1,"RUN_ID":"r","Call_Key":"k","outcome":"ok","duration_ms":3}`),
		[]byte(`{"v":1,"run_id":"r","call_key":"k","outcome":"ok","duration_ms":3,"unknown":{}}`),
		[]byte(`{"v":"1","run_id":"r","call_key":"k","outcome":"ok","duration_ms":3}`),
		[]byte(`{"v":1,"run_id":"r","call_key":"k","outcome":"ok","duration_ms":3.5}`),
		[]byte(`{"v":1,"v":2}`),
		[]byte(`{"digest":"d","approved":true}`),
		[]byte(`{"digest":"d","approved":null}`),
		[]byte(`{}`), []byte(`{`), []byte(`{}}`), []byte(`{} {}`), []byte(`{}]`), []byte(`{},`), []byte(`{}:`),
		[]byte(`[]`), []byte(``), []byte(`  `), []byte("\x00\xff{"), []byte("{\"v\":1\x00}"),
		[]byte(`{"v":1,"run_id":"r","results":[{"v":1,"run_id":"r","call_key":"k","outcome":"ok","duration_ms":1}]}`),
	}
}

// Decoding gives every message the value and the error encoding/json's
// strict decoder gives, whatever was decoded before.
func TestDecodeMatchesReference(t *testing.T) {
	inputs := diffInputs()
	for _, data := range inputs {
		for _, prev := range inputs { // leave a pooled decoder after prev
			checkSameDecode(t, prev, 0)
			checkSameDecode(t, data, 0)
		}
		checkSameDecode(t, data, 16)
	}
	// A decoded message shares nothing with the bytes it was decoded from.
	c := validCall()
	call, _ := Encode(&c)
	kept, err := DecodeCall(bytes.Clone(call), 0)
	if err != nil {
		t.Fatal(err)
	}
	var want Call
	if err := decodeReference(call, 0, &want); err != nil || !reflect.DeepEqual(kept, want) {
		t.Fatalf("decoded %+v, want %+v (%v)", kept, want, err)
	}
	reused := bytes.Clone(call)
	if kept, err = DecodeCall(reused, 0); err != nil {
		t.Fatal(err)
	}
	for i := range reused {
		reused[i] = 'x'
	}
	if !reflect.DeepEqual(kept, want) {
		t.Fatalf("a call changed with the buffer it was decoded from: %+v, want %+v", kept, want)
	}
	big := []byte(`{"v":1,"run_id":"r","call_key":"k","outcome":"ok","output":"` + string(bytes.Repeat([]byte("x"), 64<<10)) + `","duration_ms":3}`)
	checkSameDecode(t, big, 0)
}

// FuzzDecodeMatchesReference compares decode with encoding/json's strict
// decoder for every message type, after a message accepted, after one
// refused and twice in a row.
func FuzzDecodeMatchesReference(f *testing.F) {
	seedMessages(f)
	for _, data := range diffInputs() {
		f.Add(data)
	}
	c := validCall()
	call, _ := Encode(&c)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSameDecode(t, call, 0)
		checkSameDecode(t, data, 4096)
		checkSameDecode(t, data, 0)
		checkSameDecode(t, []byte(`{"v":1,"x":1} {`), 0)
		checkSameDecode(t, data, 0)
		checkSameDecode(t, call, 0)
	})
}

// Decoding serves goroutines at once, each its own message.
func TestDecodeConcurrent(t *testing.T) {
	inputs := diffInputs()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if err := sameDecode(inputs[(g+i)%len(inputs)], 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// checkSameEncode fails t unless Encode gives m the bytes encoding/json
// gives it.
func checkSameEncode(t *testing.T, m message) {
	t.Helper()
	got, gotErr := Encode(m)
	ref := m
	if c, ok := m.(*Call); ok && c.Attempt == 0 {
		wire := *c // Encode writes the deprecated attempt as 1
		wire.Attempt = 1
		ref = &wire
	}
	want, wantErr := json.Marshal(ref)
	if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("Encode(%+v) = %q, %v; want %q, %v", m, got, gotErr, want, wantErr)
	}
}

// Encoding gives every message the bytes encoding/json gives it: strings
// that need escaping, invalid UTF-8, raw arguments with spaces, times.
func TestEncodeMatchesReference(t *testing.T) {
	odd := "<tag> & \u2028\u2029 \x00\x1f \"q\" \\ \xff\xfe é 😀"
	c := validCall()
	c.Arguments = json.RawMessage(` { "text" : "a b" , "n" : [ 1 , 2.50 ] } `)
	c.CallID = CallID(odd)
	c.Deadline = c.Deadline.Add(123456789)
	c.Approval = &ApprovalProof{RequestSeq: 1, DecisionSeq: 2}
	checkSameEncode(t, &c)
	r := benchResult()
	r.Output, r.ErrorType, r.Worker = odd, odd, odd
	checkSameEncode(t, &r)
	for _, data := range diffInputs() {
		for _, newMsg := range decodeTargets() {
			m := newMsg()
			_ = decodeReference(data, 0, m) // what it decoded, even in part
			checkSameEncode(t, m)
		}
	}
}

// FuzzEncodeMatchesReference encodes every message that data decodes to,
// by the reference decoder, and compares the bytes with encoding/json's.
func FuzzEncodeMatchesReference(f *testing.F) {
	seedMessages(f)
	for _, data := range diffInputs() {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, newMsg := range decodeTargets() {
			m := newMsg()
			_ = decodeReference(data, 0, m) // what it decoded, even in part
			checkSameEncode(t, m)
		}
	})
}
