// Package mcptool serves the tools of Model Context Protocol servers as
// harness tools, so a toolworker runs them like any other tool of the fleet.
//
// A [Server] is one MCP server from a manifest: a stdio server (a command
// the worker starts and supervises: restarted with backoff when it dies, its
// whole process group killed on stop) or a streamable-HTTP server (a URL,
// with headers taken from the worker's environment). It lists the server's
// tools and turns each into a [harness.Tool] named prefix+name: the MCP
// inputSchema is the tool's parameter schema. Every tool is non-idempotent
// and approval-gated unless the manifest says otherwise: the server's
// annotations (readOnlyHint, idempotentHint, destructiveHint), untrusted by
// the specification, never lower either. A tool whose schema does not
// compile refuses the start.
//
// A call is one tools/call with the call's deadline. At the deadline or on
// cancel the request is cancelled; a stdio server that has not answered the
// cancelled request within [ServerConfig].CancelGrace is killed and
// restarted, so a deadline ends the work. Results: text parts joined,
// structuredContent as JSON (validated against the tool's outputSchema),
// images, audio and blobs as a placeholder naming type and size, isError as
// a failure of type [ErrToolError]. The values of the server's environment
// and headers are secrets: they are replaced by [Redacted] in every output
// and never logged.
//
// Each tools/call has an OpenTelemetry client span ("tools/call <tool>",
// names and error types only) and sends its W3C trace context in
// params._meta (traceparent, tracestate), so a traced server's spans join
// the fleet's trace. [Server.Up], [Server.Restarts], [Server.CancelStats]
// and [Server.Kills] feed the worker's metrics.
//
// Every failure reaches the model as a Go type name (mcptool.ToolError,
// mcptool.ConnectionLost, ...), never a message: see the Err* variables.
package mcptool
