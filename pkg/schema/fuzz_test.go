package schema_test

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// checkArgumentError fails unless err is an *ArgumentError with a bounded,
// valid UTF-8 message.
func checkArgumentError(t *testing.T, err error) {
	t.Helper()
	var ae *schema.ArgumentError
	if !errors.As(err, &ae) {
		t.Fatalf("error of type %T, want *schema.ArgumentError", err)
	}
	if len(ae.Msg) > schema.MaxMessageLen+len("…") || !utf8.ValidString(ae.Msg) || ae.Msg == "" {
		t.Fatalf("message of %d bytes (valid UTF-8: %v), want 1..%d", len(ae.Msg), utf8.ValidString(ae.Msg), schema.MaxMessageLen)
	}
}

// FuzzValidate validates model-written arguments against tool schemas. It
// checks what coordinator and worker rely on: no panic; every refusal is an
// *ArgumentError with a bounded message; accepted arguments are one JSON
// object; and the canonical form the coordinator publishes is judged
// exactly like the arguments the model wrote, so a worker never refuses a
// call the coordinator accepted.
func FuzzValidate(f *testing.F) {
	schemas := []string{
		closedSchema,
		`{"type":"object","properties":{"expression":{"type":"string","minLength":1,"maxLength":1000}},"required":["expression"],"additionalProperties":false}`,
		`{"type":"object","properties":{"a":{"type":"number","multipleOf":0.1},"b":{"type":"array","items":{"type":"integer"},"uniqueItems":true}}}`,
		`{"type":"object","properties":{"s":{"type":"string","pattern":"^[a-z]+$","format":"email"}},"patternProperties":{"^x-":{"const":1}}}`,
		`{"type":"object","$defs":{"n":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/n"},{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}]}},"properties":{"list":{"$ref":"#/$defs/n"}}}`,
		`{}`,
	}
	args := []string{
		`{"text":"hi"}`, `{"text":"hi","n":1.0}`, `{"text":5}`, `{"expression":"1+2"}`, `{"a":0.3,"b":[1,1]}`,
		`{"s":"abc","x-y":1}`, `{"list":{"next":{"next":null}}}`, `{"a":1,"a":"x"}`, `{"a":1e400}`,
		`{"text":"\ud800"}`, "{\"text\":\"\xff\"}", `[]`, `null`, ``, `{"a":}`, `{} {}`, ` {"text" : "a" } `,
		`{"n":-0}`, `{"n":12345678901234567890123}`,
	}
	for i, a := range args {
		f.Add(schemas[i%len(schemas)], a)
	}
	f.Fuzz(func(t *testing.T, schemaText, args string) {
		s, err := schema.Compile("tool", []byte(schemaText))
		if err != nil {
			return
		}
		err = s.Validate([]byte(args))
		if err != nil {
			checkArgumentError(t, err)
		}
		obj, perr := schema.ParseObject([]byte(args))
		if perr != nil {
			checkArgumentError(t, perr)
			if err == nil {
				t.Fatalf("Validate accepted arguments that ParseObject refuses: %v", perr)
			}
			return
		}
		if obj == nil {
			t.Fatal("ParseObject returned a nil object without an error")
		}
		canon, cerr := protocol.Canonical([]byte(args))
		if cerr != nil {
			t.Fatalf("arguments ParseObject accepts have no canonical form: %v", cerr)
		}
		if !json.Valid(canon) {
			t.Fatalf("canonical form %q is not valid JSON", canon)
		}
		cerr = s.Validate(canon)
		if (err == nil) != (cerr == nil) {
			t.Fatalf("the model's arguments and their canonical form are judged differently: %v vs %v", err, cerr)
		}
	})
}

// FuzzCompile compiles schemas as they arrive through the catalog, from
// any worker: no panic, no external reference followed, and a compiled
// schema validates any object without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		closedSchema, `{}`, `{"$ref":"#"}`, `{"$ref":"http://127.0.0.1:1/x"}`, `{"$id":"http://x/y","$ref":"z"}`,
		`{"allOf":[{"$ref":"#"}]}`, `{"properties":{"a":{"pattern":"("}}}`, `{"$schema":"http://json-schema.org/draft-04/schema#"}`,
		`{"$dynamicRef":"#meta"}`, `{"type":"object","format":"regex"}`, `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, schemaText string) {
		s, err := schema.Compile("tool", []byte(schemaText))
		if err != nil {
			return
		}
		for _, args := range []string{`{}`, `{"a":1,"b":"x","c":[{"d":null}]}`} {
			if err := s.Validate([]byte(args)); err != nil {
				checkArgumentError(t, err)
			}
		}
	})
}
