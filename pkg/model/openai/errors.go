package openai

import "github.com/toolfleet/toolfleet/pkg/model/modelhttp"

// The errors of this package are those every HTTP provider shares (package
// modelhttp), so that errors.Is and errors.As work across providers.
var (
	// ErrTimeout is an attempt that got no complete response within
	// Config.RequestTimeout. It is retried like a transport error.
	ErrTimeout = modelhttp.ErrTimeout

	// ErrResponseTooLarge is a response body over Config.MaxResponseBytes. It
	// is not retried.
	ErrResponseTooLarge = modelhttp.ErrResponseTooLarge

	// ErrBadResponse is a 2xx response that is not a usable chat completion:
	// not JSON of the expected shape, or without choices. It is not retried.
	ErrBadResponse = modelhttp.ErrBadResponse

	// ErrInvalidRequest is a loop.Request that cannot be expressed in the
	// chat-completions format (an unknown role, tool parameters that are not
	// a JSON object). Nothing is sent.
	ErrInvalidRequest = modelhttp.ErrInvalidRequest
)

// APIError is an HTTP error status from the server (Provider "openai"). Its
// Error method names the status and the error type and code the server gave;
// it never includes the request, the response body or the server's message
// (APIError.Message), which may quote the prompt (or, from some servers, the
// key).
type APIError = modelhttp.APIError

// TransportError is a request that could not be sent, or a response that
// could not be read, for a reason below HTTP (refused or reset connection,
// DNS, TLS). It is retried. Its message omits the request URL.
type TransportError = modelhttp.TransportError
