package protocol

import "fmt"

// Error codes. They are stable and append-only; compare with errors.Is
// against the Err values below.
const (
	CodeTooLarge     = "too_large"
	CodeMalformed    = "malformed"
	CodeVersion      = "unsupported_version"
	CodeMissingField = "missing_field"
	CodeInvalidField = "invalid_field"
)

// Error is a decoding or validation error with a stable code. Its message
// never quotes more than a short prefix of the offending input.
type Error struct {
	Code  string // one of the Code constants
	Field string // the JSON field at fault, if any
	Msg   string // what is wrong, for people
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("protocol: %s: field %q: %s", e.Code, e.Field, e.Msg)
	}
	return fmt.Sprintf("protocol: %s: %s", e.Code, e.Msg)
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, ErrTooLarge) works for any too-large error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Field == "" && t.Msg == ""
}

var (
	// ErrTooLarge is a payload over the configured limit.
	ErrTooLarge = &Error{Code: CodeTooLarge}
	// ErrMalformed is a payload that is not the expected JSON object.
	ErrMalformed = &Error{Code: CodeMalformed}
	// ErrVersion is a message whose "v" is not 1.
	ErrVersion = &Error{Code: CodeVersion}
	// ErrMissingField is a message without a required field.
	ErrMissingField = &Error{Code: CodeMissingField}
	// ErrInvalidField is a field whose value breaks its rule.
	ErrInvalidField = &Error{Code: CodeInvalidField}
)

func missing(field string) error {
	return &Error{Code: CodeMissingField, Field: field, Msg: "required"}
}

func invalid(field, msg string) error { return &Error{Code: CodeInvalidField, Field: field, Msg: msg} }
