package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Func is the body of a typed tool: it gets the call's arguments decoded
// into In and returns its output.
type Func[In, Out any] func(ctx context.Context, in In) (Out, error)

// Config describes a tool. Name is required; the zero value of every other
// field means its default.
type Config struct {
	// Name is the tool's name, a subject token: it must match
	// protocol.TokenPattern (letters, digits, '_' and '-', at most 64).
	Name string
	// Description tells the model what the tool does. Default: none.
	Description string
	// Timeout bounds one call: it is in the tool's spec, and a coordinator
	// gives each call a deadline that far ahead (unless its own
	// loop.Config.ToolTimeout overrides it); the tool's ctx ends at the
	// deadline. Default: harness.DefaultTimeout (30s).
	Timeout time.Duration
	// Idempotent tools may run again for the same call after a worker
	// crash (the call is redelivered). A tool that is not idempotent is
	// claimed before it runs, and a worker that dies while it runs leaves
	// the outcome "outcome_unknown" rather than running it again.
	// Default: false.
	Idempotent bool
	// RequiresApproval tools run only after an operator approves each
	// call; the worker checks the approval's proof itself. Default: false.
	RequiresApproval bool
	// ReadOnly declares that the tool changes nothing: a dry run
	// (loop.Config.DryRun) runs it, and answers every other tool's call
	// simulated. Default: false.
	ReadOnly bool
}

// CallKeyFrom returns the idempotency key of the call a tool runs for (see
// [harness.CallKeyFrom]), or "" outside a call.
func CallKeyFrom(ctx context.Context) string { return harness.CallKeyFrom(ctx) }

// New returns the tool cfg describes, whose body is fn. Its schema is
// derived from In with jsonschema.For: In must be a struct (or a map with
// string keys), since a tool's arguments are a JSON object; struct fields
// are required unless their json tag says omitempty or omitzero, and no
// other property is accepted.
//
// Errors are [config.Error]s naming the field: "Name" for a name that is not
// a subject token, "Timeout" for a negative one, "In" for a type that
// cannot have an object schema, "Func" for a nil fn.
func New[In, Out any](cfg Config, fn Func[In, Out]) (harness.Tool, error) {
	if _, err := protocol.ParseToolName(cfg.Name); err != nil {
		return harness.Tool{}, config.Errorf("Name", "must match %s, got %q", protocol.TokenPattern, clip(cfg.Name))
	}
	if cfg.Timeout < 0 {
		return harness.Tool{}, config.Errorf("Timeout", "must be >= 0, got %v", cfg.Timeout)
	}
	if fn == nil {
		return harness.Tool{}, config.Errorf("Func", "required")
	}
	params, err := schemaOf[In]()
	if err != nil {
		return harness.Tool{}, &config.FieldError{Field: "In", Err: err}
	}
	_, outIsString := any(*new(Out)).(string)
	return harness.Tool{
		Name:             cfg.Name,
		Description:      cfg.Description,
		Parameters:       params,
		Timeout:          cfg.Timeout,
		Idempotent:       cfg.Idempotent,
		RequiresApproval: cfg.RequiresApproval,
		ReadOnly:         cfg.ReadOnly,
		Run: func(ctx context.Context, args json.RawMessage) (string, error) {
			in, err := decode[In](args)
			if err != nil {
				return "", err
			}
			out, err := fn(ctx, in)
			if err != nil {
				return "", err
			}
			if outIsString {
				return any(out).(string), nil
			}
			b, err := json.Marshal(out)
			if err != nil {
				return "", &OutputError{Err: err}
			}
			return string(b), nil
		},
	}, nil
}

// Must is New that panics on an error: for package-level tool variables
// and tests, whose configuration is a constant.
func Must(t harness.Tool, err error) harness.Tool {
	if err != nil {
		panic(err)
	}
	return t
}

// ArgumentsError is a call's arguments that passed the schema but do not
// decode into the tool's input type (a value out of the Go type's range).
// Its message names no value.
type ArgumentsError struct{ Err error }

func (e *ArgumentsError) Error() string { return "arguments do not decode into the input type" }

// Unwrap returns the decoder's error.
func (e *ArgumentsError) Unwrap() error { return e.Err }

// OutputError is a tool output that cannot be marshalled to JSON.
type OutputError struct{ Err error }

func (e *OutputError) Error() string { return "output does not marshal to JSON" }

// Unwrap returns the encoder's error.
func (e *OutputError) Unwrap() error { return e.Err }

// schemaOf is the JSON Schema of In, which must describe an object.
func schemaOf[In any]() (json.RawMessage, error) {
	t := reflect.TypeFor[In]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct && !(t.Kind() == reflect.Map && t.Key().Kind() == reflect.String) {
		return nil, fmt.Errorf("%s cannot be a tool's input: arguments are a JSON object (use a struct)", t)
	}
	s, err := jsonschema.ForType(t, &jsonschema.ForOptions{})
	if err != nil {
		return nil, fmt.Errorf("no JSON Schema for %s: %w", t, err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("no JSON Schema for %s: %w", t, err)
	}
	return b, nil
}

// decode decodes validated arguments into an In, refusing unknown fields
// and trailing data.
func decode[In any](args json.RawMessage) (In, error) {
	var in In
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, &ArgumentsError{Err: err}
	}
	if dec.More() {
		return in, &ArgumentsError{Err: errors.New("trailing data")}
	}
	return in, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
