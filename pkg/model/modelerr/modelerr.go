// Package modelerr holds the errors a model client returns: what a caller
// tells apart (an HTTP status, a transport failure, a timeout) without
// linking a provider's SDK. pkg/model/modelhttp, which the providers use,
// gives the same names.
package modelerr

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

var (
	// ErrTimeout is an attempt that got no complete response within the
	// request timeout. It is retried like a transport error.
	ErrTimeout = errors.New("model: no response within the request timeout")

	// ErrResponseTooLarge is a response body over the size limit. It is not
	// retried.
	ErrResponseTooLarge = errors.New("model: response body over the size limit")

	// ErrBadResponse is a 2xx response that is not a usable answer: not JSON
	// of the expected shape, or one the loop cannot use (a tool call cut off
	// by the output limit, an incomplete or failed response). It is not
	// retried.
	ErrBadResponse = errors.New("model: response is not a usable answer")

	// ErrInvalidRequest is a loop.Request that cannot be expressed in the
	// provider's format. Nothing is sent.
	ErrInvalidRequest = errors.New("model: invalid request")
)

// APIError is an HTTP error status from a model server. Its Error method names
// the provider, the status and the error type and code the server gave; it
// never includes the request, the response body or the server's message,
// which may quote the prompt or the key.
type APIError struct {
	// Provider prefixes Error(), e.g. "anthropic".
	Provider string
	// StatusCode is the HTTP status.
	StatusCode int
	// Type and Code are the server's error type and code when they are
	// short identifiers, else empty.
	Type string
	Code string
	// Message is the server's error message. It may quote the request: it is
	// not part of Error(), GoString() or the JSON encoding, and is never
	// logged.
	Message string `json:"-"`
	// RetryAfter is the wait the server asked for, or zero.
	RetryAfter time.Duration
	// RetryAfterSet is true when a Retry-After header was present, maybe "0".
	RetryAfterSet bool `json:"-"`
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s: HTTP %d", e.Provider, e.StatusCode)
	if t := statusText(e.StatusCode); t != "" {
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

func statusText(code int) string {
	if code == 529 {
		return "Overloaded"
	}
	return http.StatusText(code)
}

// GoString keeps %#v on the safe summary: Message stays out.
func (e *APIError) GoString() string { return e.Error() }

// Retryable reports whether the status is retried: 429 or any 5xx.
func (e *APIError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// TransportError is a request that could not be sent, or a response that
// could not be read, for a reason below HTTP. It is retried. Its message
// omits the request URL.
type TransportError struct {
	Err error
}

func (e *TransportError) Error() string { return "model: transport: " + e.Err.Error() }

func (e *TransportError) Unwrap() error { return e.Err }

// identifier matches the error types and codes worth repeating in Error().
var identifier = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// SafeIdentifier returns s when it is a short identifier, else "".
func SafeIdentifier(s string) string {
	if identifier.MatchString(s) {
		return s
	}
	return ""
}

// ErrorKind names an error's class for logs and spans, never its text.
func ErrorKind(err error) string {
	var apiErr *APIError
	var terr *TransportError
	switch {
	case errors.As(err, &apiErr):
		return "http_" + strconv.Itoa(apiErr.StatusCode)
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrResponseTooLarge):
		return "response_too_large"
	case errors.As(err, &terr):
		return "transport"
	case errors.Is(err, ErrBadResponse):
		return "bad_response"
	case errors.Is(err, ErrInvalidRequest):
		return "invalid_request"
	default:
		return fmt.Sprintf("%T", err)
	}
}
