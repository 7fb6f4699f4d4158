// Package schema compiles tool parameter schemas and validates tool-call
// arguments against them, with JSON Schema draft 2020-12
// (santhosh-tekuri/jsonschema/v6).
//
// Coordinators validate before publishing a call and workers validate again
// before running it, so both use this package.
//
// # Caveats
//
// Schemas are untrusted too (they arrive through the catalog): a schema can
// never make the validator read a file or the network, because every $ref
// outside the schema itself is refused. format is annotation-only, as draft
// 2020-12 specifies.
package schema

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	fastjson "github.com/segmentio/encoding/json"
)

// MaxMessageLen bounds the validation message handed to the model.
const MaxMessageLen = 1000

// Schema is a compiled parameter schema. It is safe for concurrent use.
type Schema struct {
	s *jsonschema.Schema
}

// noLoader refuses every external reference.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errors.New("external schema references are not allowed")
}

// Compile compiles a tool's parameter schema. name only labels error
// messages. The schema must describe an object: tool arguments are always a
// JSON object.
func Compile(name string, raw []byte) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema of tool %q: not JSON: %w", name, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schema of tool %q: must be a JSON object", name)
	}
	if t, ok := obj["type"]; ok && t != "object" {
		return nil, fmt.Errorf("schema of tool %q: type must be \"object\"", name)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	url := "urn:toolfleet:tool:" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema of tool %q: %w", name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schema of tool %q: %w", name, err)
	}
	return &Schema{s: s}, nil
}

// ArgumentError says why arguments were refused. Its message is meant for
// the model, which wrote the arguments; it may quote them, so it must not be
// logged unless the operator opted in.
type ArgumentError struct {
	Msg string
}

func (e *ArgumentError) Error() string { return e.Msg }

// Validate checks that args is one JSON object that satisfies the schema. A
// bool is not an integer; 1.0 is. The error is an [*ArgumentError].
func (s *Schema) Validate(args []byte) error {
	obj, err := ParseObject(args)
	if err != nil {
		return err
	}
	return s.ValidateObject(obj)
}

// ValidateObject is [Schema.Validate] for arguments already parsed by
// [ParseObject], so a caller that needs the parsed object too parses once.
// The error is an [*ArgumentError].
func (s *Schema) ValidateObject(obj map[string]any) error {
	if err := s.s.Validate(obj); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return &ArgumentError{Msg: describe(ve)}
		}
		return &ArgumentError{Msg: "arguments do not match the schema"}
	}
	return nil
}

// ParseObject decodes args as exactly one JSON object (numbers kept exact).
// The error is an [*ArgumentError].
func ParseObject(args []byte) (map[string]any, error) {
	v, err := parseJSON(args)
	if err != nil {
		return nil, &ArgumentError{Msg: "arguments are not valid JSON"}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &ArgumentError{Msg: "arguments must be a JSON object"}
	}
	return obj, nil
}

// parseJSON decodes data as jsonschema.UnmarshalJSON does (one JSON value,
// numbers as json.Number, nothing but whitespace after it), first with
// segmentio/encoding/json, which decodes the same values several times
// faster, and again with jsonschema's own decoding if that fails.
func parseJSON(data []byte) (any, error) {
	var v any
	if rest, err := fastjson.Parse(data, &v, fastjson.UseNumber); err == nil && len(rest) == 0 {
		return v, nil
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

// describe flattens a validation error into "at '/path': message" lines,
// sorted and joined by "; ", bounded by MaxMessageLen.
func describe(ve *jsonschema.ValidationError) string {
	var parts []string
	out := ve.BasicOutput()
	for _, u := range out.Errors {
		if u.Error == nil {
			continue
		}
		msg := u.Error.String()
		if strings.HasPrefix(msg, "validation failed") {
			continue
		}
		loc := u.InstanceLocation
		if loc == "" {
			loc = "/"
		}
		parts = append(parts, fmt.Sprintf("at '%s': %s", loc, msg))
	}
	if len(parts) == 0 {
		parts = append(parts, "arguments do not match the schema")
	}
	// The validator walks maps in random order; sort so the same arguments
	// always get the same message.
	slices.Sort(parts)
	parts = slices.Compact(parts)
	return bound(strings.Join(parts, "; "), MaxMessageLen)
}

func bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
