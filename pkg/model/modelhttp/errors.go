package modelhttp

import "github.com/toolfleet/toolfleet/pkg/model/modelerr"

// The errors of a model client, defined in [modelerr] so that a program
// that only tells them apart (a serving coordinator deciding to park a
// run) links no provider SDK.
var (
	// ErrTimeout is [modelerr.ErrTimeout].
	ErrTimeout = modelerr.ErrTimeout
	// ErrResponseTooLarge is [modelerr.ErrResponseTooLarge].
	ErrResponseTooLarge = modelerr.ErrResponseTooLarge
	// ErrBadResponse is [modelerr.ErrBadResponse].
	ErrBadResponse = modelerr.ErrBadResponse
	// ErrInvalidRequest is [modelerr.ErrInvalidRequest].
	ErrInvalidRequest = modelerr.ErrInvalidRequest
)

// APIError is [modelerr.APIError].
type APIError = modelerr.APIError

// TransportError is [modelerr.TransportError].
type TransportError = modelerr.TransportError

// SafeIdentifier is [modelerr.SafeIdentifier].
func SafeIdentifier(s string) string { return modelerr.SafeIdentifier(s) }

// ErrorKind is [modelerr.ErrorKind].
func ErrorKind(err error) string { return modelerr.ErrorKind(err) }
