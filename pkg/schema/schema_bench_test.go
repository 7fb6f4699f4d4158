package schema_test

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/schema"
)

// Schemas shaped like the built-in tools' closed schemas.
const (
	echoSchema = `{"type":"object","properties":{"text":{"type":"string","maxLength":100000}},` +
		`"required":["text"],"additionalProperties":false}`
	richSchema = `{"type":"object","properties":{` +
		`"path":{"type":"string","minLength":1,"maxLength":4096},` +
		`"mode":{"enum":["append","overwrite"]},` +
		`"lines":{"type":"array","items":{"type":"string"},"maxItems":100},` +
		`"retries":{"type":"integer","minimum":0,"maximum":10}},` +
		`"required":["path","mode"],"additionalProperties":false}`
)

func BenchmarkValidate(b *testing.B) {
	for _, bc := range []struct {
		name, schema, args string
		valid              bool
	}{
		{"echo/valid", echoSchema, `{"text":"` + strings.Repeat("x", 128) + `"}`, true},
		{"echo/wrong-type", echoSchema, `{"text":42}`, false},
		{"echo/extra-field", echoSchema, `{"text":"hi","cmd":"rm -rf /"}`, false},
		{"rich/valid", richSchema, `{"path":"/tmp/a.txt","mode":"append","lines":["a","b","c"],"retries":3}`, true},
		{"rich/invalid", richSchema, `{"path":"","mode":"truncate","lines":[1,2],"retries":99}`, false},
		{"not-an-object", echoSchema, `["text"]`, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := schema.Compile("bench", []byte(bc.schema))
			if err != nil {
				b.Fatal(err)
			}
			args := []byte(bc.args)
			b.SetBytes(int64(len(args)))
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Validate(args); (err == nil) != bc.valid {
					b.Fatalf("Validate = %v, want valid=%v", err, bc.valid)
				}
			}
		})
	}
}

func BenchmarkParseObject(b *testing.B) {
	args := []byte(`{"text":"` + strings.Repeat("x", 128) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := schema.ParseObject(args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := schema.Compile("bench", []byte(richSchema)); err != nil {
			b.Fatal(err)
		}
	}
}
