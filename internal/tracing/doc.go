// Package tracing carries the W3C trace context in NATS message headers and
// MCP requests' _meta (see tracemeta). It depends on the OpenTelemetry API
// and nats.go only; the SDK and the OTLP exporter that the commands install
// are in tracingsdk, so that the public packages built on the fleet's
// internals do not bring them to their users.
//
// Spans carry ids, tool names, outcomes, counts and token usage — never
// argument values, outputs or error messages, unless the operator opted in
// (--trace-args adds argument values).
package tracing
