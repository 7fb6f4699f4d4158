package schema_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/pkg/schema"
)

// closedSchema is shaped like a built-in tool's schema.
const closedSchema = `{"type":"object","properties":{` +
	`"text":{"type":"string","maxLength":10},"n":{"type":"integer","minimum":0}},` +
	`"required":["text"],"additionalProperties":false}`

func TestCompile(t *testing.T) {
	tests := []struct {
		name, schema string
		ok           bool
	}{
		{"closed object", closedSchema, true},
		{"no type", `{"properties":{"a":{"type":"string"}}}`, true},
		{"empty", `{}`, true},
		{"internal ref", `{"type":"object","$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`, true},
		{"not JSON", `{"type":`, false},
		{"trailing data", `{} {}`, false},
		{"array", `[]`, false},
		{"boolean schema", `true`, false},
		{"string type", `{"type":"string"}`, false},
		{"type list", `{"type":["object","null"]}`, false},
		{"external ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`, false},
		{"file ref", `{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`, false},
		{"bad keyword value", `{"type":"object","minProperties":-1}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := schema.Compile("tool", []byte(tt.schema))
			if got := err == nil; got != tt.ok {
				t.Fatalf("Compile ok = %v (err %v), want %v", got, err, tt.ok)
			}
			if tt.ok && s == nil {
				t.Fatal("Compile returned a nil schema without an error")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	s, err := schema.Compile("tool", []byte(closedSchema))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, args string
		wantMsg    string // "" means valid
	}{
		{"valid", `{"text":"hi"}`, ""},
		{"valid with integer", `{"text":"hi","n":3}`, ""},
		{"1.0 is an integer", `{"text":"hi","n":1.0}`, ""},
		{"key order and space", ` { "n" : 2 , "text" : "x" } `, ""},
		{"not JSON", `{"text":`, "arguments are not valid JSON"},
		{"trailing data", `{"text":"a"} {}`, "arguments are not valid JSON"},
		{"array", `["text"]`, "arguments must be a JSON object"},
		{"string", `"text"`, "arguments must be a JSON object"},
		{"null", `null`, "arguments must be a JSON object"},
		{"empty", ``, "arguments are not valid JSON"},
		{"missing required", `{}`, "at '/'"},
		{"wrong type", `{"text":5}`, "at '/text'"},
		{"bool is not an integer", `{"text":"a","n":true}`, "at '/n'"},
		{"fraction is not an integer", `{"text":"a","n":1.5}`, "at '/n'"},
		{"below minimum", `{"text":"a","n":-1}`, "at '/n'"},
		{"too long", `{"text":"0123456789x"}`, "at '/text'"},
		{"extra property", `{"text":"a","cmd":"rm"}`, "at '/'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Validate([]byte(tt.args))
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tt.args, err)
				}
				return
			}
			var ae *schema.ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("Validate(%s) = %#v, want an *ArgumentError", tt.args, err)
			}
			if !strings.Contains(ae.Msg, tt.wantMsg) {
				t.Fatalf("message %q does not contain %q", ae.Msg, tt.wantMsg)
			}
		})
	}
}

// TestValidateMessageIsBounded: a message listing many failures, each
// quoting long model-written text, stays within MaxMessageLen and valid
// UTF-8.
func TestValidateMessageIsBounded(t *testing.T) {
	var props, args []string
	for i := range 200 {
		k := strings.Repeat("é", 50) + string(rune('a'+i%26)) + strings.Repeat("x", i)
		props = append(props, `"`+k+`":{"type":"integer"}`)
		args = append(args, `"`+k+`":"`+strings.Repeat("日", 40)+`"`)
	}
	s, err := schema.Compile("tool", []byte(`{"type":"object","properties":{`+strings.Join(props, ",")+`}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Validate([]byte(`{` + strings.Join(args, ",") + `}`))
	var ae *schema.ArgumentError
	if !errors.As(err, &ae) {
		t.Fatalf("Validate = %v, want an *ArgumentError", err)
	}
	if len(ae.Msg) > schema.MaxMessageLen+len("…") || !utf8.ValidString(ae.Msg) {
		t.Fatalf("message of %d bytes (valid UTF-8: %v), want at most %d", len(ae.Msg), utf8.ValidString(ae.Msg), schema.MaxMessageLen)
	}
}

func TestParseObject(t *testing.T) {
	obj, err := schema.ParseObject([]byte(`{"big":12345678901234567890123,"s":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := obj["big"]; got == nil || strings.Contains(toString(got), "e+") {
		t.Fatalf("big number = %v, want it kept exact", got)
	}
	for _, bad := range []string{``, `[]`, `1`, `{"a":1}x`, `{"a":}`} {
		if _, err := schema.ParseObject([]byte(bad)); err == nil {
			t.Errorf("ParseObject(%q) succeeded", bad)
		}
	}
}

func toString(v any) string {
	if s, ok := v.(interface{ String() string }); ok {
		return s.String()
	}
	return ""
}

// TestValidateMessageIsDeterministic checks that the same bad arguments get
// the same message every time, whatever order the validator walks them in.
func TestValidateMessageIsDeterministic(t *testing.T) {
	s, err := schema.Compile("t", []byte(`{"type":"object","properties":{
		"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"},
		"e":{"type":"integer"},"f":{"type":"integer"},"g":{"type":"integer"},"h":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	args := []byte(`{"a":"x","b":"x","c":"x","d":"x","e":"x","f":"x","g":"x","h":"x"}`)
	first := s.Validate(args).Error()
	for range 50 {
		if got := s.Validate(args).Error(); got != first {
			t.Fatalf("message changed between calls:\n%s\n%s", first, got)
		}
	}
}
