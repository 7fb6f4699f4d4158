package harness

import "context"

// EnvCallKey is the environment variable an exec tool finds its call's
// idempotency key in.
const EnvCallKey = "TOOLFLEET_CALL_KEY"

type callKeyCtx struct{}

// WithCallKey returns ctx carrying a call's idempotency key.
func WithCallKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, callKeyCtx{}, key)
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
