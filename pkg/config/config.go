package config

import "fmt"

// Error is a configuration value that cannot work; retrying does not help.
type Error interface {
	error
	// ConfigField is the Go field whose value cannot work, as a path from
	// the configuration struct the library was given: "MaxRounds",
	// "Conn.CredsFile", "Loop.MaxRounds".
	ConfigField() string
	// ConfigProblem says what is wrong with the value, without the
	// field's name: "must be >= 1, got 0".
	ConfigProblem() string
}

// FieldError is an [Error] built from a field and what is wrong with it.
type FieldError struct {
	// Field is the Go field path (see [Error.ConfigField]).
	Field string
	// Err is the problem.
	Err error
}

// Errorf returns a *FieldError for field whose problem is formatted as by
// [fmt.Errorf].
func Errorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

func (e *FieldError) Error() string { return e.Field + ": " + e.ConfigProblem() }

// Unwrap returns the problem.
func (e *FieldError) Unwrap() error { return e.Err }

// ConfigField returns e.Field.
func (e *FieldError) ConfigField() string { return e.Field }

// ConfigProblem returns the text of e.Err.
func (e *FieldError) ConfigProblem() string {
	if e.Err == nil {
		return "invalid"
	}
	return e.Err.Error()
}

// Prefix returns an [Error] like e whose field is prefix + "." + its own:
// how a library reports an error of a configuration nested in its own.
func Prefix(prefix string, e Error) Error {
	return &prefixed{prefix: prefix, err: e}
}

type prefixed struct {
	prefix string
	err    Error
}

func (p *prefixed) Error() string { return p.ConfigField() + ": " + p.err.ConfigProblem() }

func (p *prefixed) ConfigField() string { return p.prefix + "." + p.err.ConfigField() }

func (p *prefixed) ConfigProblem() string { return p.err.ConfigProblem() }

func (p *prefixed) Unwrap() error { return p.err }

// Errors returns every [Error] in err's tree, in the order of a depth-first
// walk (errors.Join and %w wrapping are followed; an Error's own causes are
// not searched further). It returns nil when err holds none.
func Errors(err error) []Error {
	var out []Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if ce, ok := err.(Error); ok {
			out = append(out, ce)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}
