// Package tool makes a fleet tool of a typed Go function.
//
//	add, err := tool.New(tool.Config{Name: "add", Description: "Adds two numbers."},
//		func(ctx context.Context, in struct{ A, B float64 }) (float64, error) {
//			return in.A + in.B, nil
//		})
//
// The tool's JSON Schema is derived from In (see [New]): `json` tags name
// the properties and a `jsonschema:"..."` tag describes one, as with the
// MCP Go SDK's mcp.AddTool. The harness validates a call's arguments
// against that schema before the function runs; they are then decoded into
// In strictly (an unknown field is refused). The Out value is marshalled to
// JSON, except a string, which stays text.
//
// The result is a [harness.Tool], the low-level form (a hand-written schema
// and a func(ctx, json.RawMessage) (string, error)), which pkg/worker
// serves.
//
// # What the function may rely on
//
//   - ctx ends at the call's deadline, on a cancellation and when the worker
//     shuts down: a tool that ignores it keeps running after its call was
//     answered "timeout" (Go cannot stop a goroutine).
//   - [CallKeyFrom](ctx) is the call's idempotency key, the same on every
//     delivery of the call: pass it downstream (an Idempotency-Key header)
//     to make a side effect happen once.
//   - A panic is recovered into a "failed" outcome; an error becomes the
//     observation "Tool 'x' failed: <error type>", never its message.
//   - The output is bounded by the worker (100,000 characters by default).
//
// Progress reports from a Go tool will come through its ctx as well (a
// reporter in pkg/harness); a tool built here needs no change for them.
package tool
