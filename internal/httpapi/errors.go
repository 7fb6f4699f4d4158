package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/logkey"
)

// Error codes of the API's error body ({"error": {"code", "message"}}):
// stable, append-only; docs/api.md lists them.
const (
	CodeBadRequest      = "bad_request"
	CodeTooLarge        = "too_large"
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
	CodeCrossSite       = "cross_site"
	CodeNotFound        = "not_found"
	CodeConflict        = "conflict"
	CodeTooManyLogins   = "too_many_logins"
	CodeTooManyStreams  = "too_many_streams"
	CodeUnavailable     = "unavailable"
	CodeTimeout         = "timeout"
	CodeInternal        = "internal"
)

// apiError is an error the API answers with: an HTTP status, a stable
// code and a message safe to show (no credential, no tool's text).
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request's field at fault, if any.
	Field string `json:"field,omitempty"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, msg string) *apiError {
	return &apiError{Status: status, Code: code, Message: msg}
}

func badField(field, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: msg, Field: field}
}

// errRefused is a request's context cause when the NATS server refused
// the session's user a subject during it.
var errRefused = errors.New("refused by the NATS server's permissions")

// forbidden is the answer to what NATS refuses the session's user.
var forbidden = errorf(http.StatusForbidden, CodeForbidden, "the NATS server's permissions do not let this user do this")

// fromNATS turns err, from NATS work done for the request whose context
// is ctx, into the API's answer: a refusal by the server's permissions is
// 403 (a subject the user may not publish to, or one nobody in its
// account answers), a timeout 504, a lost connection 503; anything else is
// an internal error, whose details only the log gets.
func fromNATS(ctx context.Context, err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(context.Cause(ctx), errRefused), errors.Is(err, nats.ErrPermissionViolation),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrAuthorization):
		return forbidden
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return errorf(http.StatusGatewayTimeout, CodeTimeout, "NATS did not answer in time")
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrNoServers):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "NATS cannot be reached; try again")
	}
	return errorf(http.StatusInternalServerError, CodeInternal, "internal error")
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// fail answers e, and logs it with the request's method and route (never
// its body, query or headers); cause, if any, is logged for an internal
// error only, by its type.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, e *apiError, cause error) {
	ev := s.cfg.Logger.Info()
	if e.Status >= 500 {
		ev = s.cfg.Logger.Warn()
		if cause != nil && e.Code == CodeInternal {
			ev = ev.Str(logkey.ErrorType, errorType(cause))
		}
	}
	ev.Str(keyMethod, r.Method).Str(keyRoute, r.Pattern).Int(keyStatus, e.Status).Str(keyCode, e.Code).Msg("http api request refused")
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}

// errorType names err's type, never its text (which may quote a
// credential or a tool's output).
func errorType(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			break
		}
		err = u
	}
	return fmt.Sprintf("%T", err)
}
