package openai

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

var (
	// ErrTimeout is an attempt that got no complete response within
	// Config.RequestTimeout. It is retried like a transport error.
	ErrTimeout = errors.New("openai: no response within the request timeout")

	// ErrResponseTooLarge is a response body over Config.MaxResponseBytes. It
	// is not retried.
	ErrResponseTooLarge = errors.New("openai: response body over the size limit")

	// ErrBadResponse is a 2xx response that is not a usable chat completion:
	// not JSON of the expected shape, or without choices. It is not retried.
	ErrBadResponse = errors.New("openai: response is not a usable chat completion")

	// ErrInvalidRequest is a loop.Request that cannot be expressed in the
	// chat-completions format (an unknown role, tool parameters that are not
	// a JSON object). Nothing is sent.
	ErrInvalidRequest = errors.New("openai: invalid request")
)

// APIError is an HTTP error status from the server. Its Error method names the
// status and the error type and code the server gave; it never includes the
// request, the response body or the server's message, which may quote the
// prompt (or, from some servers, the key).
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Type and Code are the server's error.type and error.code when they are
	// short identifiers, else empty.
	Type string
	Code string
	// Message is the server's error.message. It may quote the request: it is
	// not part of Error(), GoString() or the JSON encoding, and this package
	// never logs it. Print it only where the operator asked for request
	// contents.
	Message string `json:"-"`
	// RetryAfter is the wait the server asked for with Retry-After or
	// Retry-After-Ms, or zero.
	RetryAfter time.Duration

	retryAfterSet bool // a Retry-After header was present, maybe "0"
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("openai: HTTP %d", e.StatusCode)
	if t := http.StatusText(e.StatusCode); t != "" {
		s += " " + t
	}
	switch {
	case e.Type != "" && e.Code != "":
		s += fmt.Sprintf(" (type %s, code %s)", e.Type, e.Code)
	case e.Type != "":
		s += fmt.Sprintf(" (type %s)", e.Type)
	case e.Code != "":
		s += fmt.Sprintf(" (code %s)", e.Code)
	}
	return s
}

// GoString keeps %#v on the safe summary: Message stays out.
func (e *APIError) GoString() string { return e.Error() }

// Retryable reports whether the status is one this package retries: 429 or
// any 5xx.
func (e *APIError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// TransportError is a request that could not be sent, or a response that
// could not be read, for a reason below HTTP (refused or reset connection,
// DNS, TLS). It is retried. Its message omits the request URL.
type TransportError struct {
	Err error
}

func (e *TransportError) Error() string { return "openai: transport: " + e.Err.Error() }

func (e *TransportError) Unwrap() error { return e.Err }

// identifier matches the error types and codes worth repeating in Error().
var identifier = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

func safeIdentifier(s string) string {
	if identifier.MatchString(s) {
		return s
	}
	return ""
}
