package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// neededUser names, for each command that connects as one user of
// deploy/nats-server.conf, the users it must run as.
var neededUser = map[string]string{
	"coordinator approvals": "operator",
	"coordinator runs":      "operator",
	"coordinator agents":    "operator or admin",
	"coordinator tools":     "operator",
	"coordinator provision": "admin",
}

// refusedError is the server's refusal of a subject to the command's user:
// it names the user the command needs.
type refusedError struct {
	user, need string
	err        error // the server's permissions violation
}

func (e *refusedError) Error() string {
	user := e.user
	if user == "" {
		user = "(none)"
	}
	return fmt.Sprintf("%v: NATS user %s may not do this; run it as %s (deploy/nats-server.conf, docs/setup.md)", e.err, user, e.need)
}

func (e *refusedError) Unwrap() error { return e.err }

// watchRefusals returns a context that ends, with a [refusedError] as its
// cause, at the server's first permissions violation on the connection
// the returned option is given to: a command refused by the server fails
// at once and says which user it needs, instead of waiting for an answer
// the server will never send.
// user is the NATS user the command connects as.
func watchRefusals(ctx context.Context, name, user string) (context.Context, nats.Option, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	need := neededUser[name]
	opt := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) && need != "" {
			cancel(&refusedError{user: user, need: need, err: err})
		}
	})
	return ctx, opt, cancel
}

// refusal returns the refusal that ended ctx, if one did.
func refusal(ctx context.Context) error {
	var r *refusedError
	if errors.As(context.Cause(ctx), &r) {
		return r
	}
	return nil
}
