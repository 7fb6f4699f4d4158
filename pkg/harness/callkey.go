package harness

import "context"

// EnvCallKey is the environment variable an exec tool finds its call's
// idempotency key in.
const EnvCallKey = "TOOLFLEET_CALL_KEY"

type callKeyCtx struct{}

// callKeyContext carries a call's idempotency key: one allocation per
// call, where context.WithValue makes two (the context, and the key boxed
// in an interface).
type callKeyContext struct {
	context.Context
	key string
}

func (c *callKeyContext) Value(k any) any {
	if _, ok := k.(callKeyCtx); ok {
		return c.key
	}
	return c.Context.Value(k)
}

// WithCallKey returns ctx carrying a call's idempotency key.
func WithCallKey(ctx context.Context, key string) context.Context {
	return &callKeyContext{Context: ctx, key: key}
}

// CallKeyFrom returns the idempotency key of the call a Go tool runs for,
// or "" when the caller gave none. The key is stable for the call: the
// same on a redelivery to another worker and after the run is resumed by
// another coordinator, and different for every other call, so a tool can
// pass it to a downstream API (an Idempotency-Key header) to make even a
// retried side effect happen once.
func CallKeyFrom(ctx context.Context) string {
	k, _ := ctx.Value(callKeyCtx{}).(string)
	return k
}
