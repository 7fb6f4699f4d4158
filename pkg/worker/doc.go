// Package worker serves tools on a toolfleet from any Go program.
//
//	w, err := worker.New(nc, worker.Config{Tools: []harness.Tool{add}})
//	if err != nil { ... }
//	err = w.Run(ctx) // serves until ctx ends, then drains
//
// A worker made here is the one the toolworker command runs, with every
// guarantee it has:
//
//   - its tools' specs are written to the fleet's catalog, and a NATS micro
//     discovery service lists the worker and its tools ("nats micro ls");
//   - each tool has one durable consumer shared by every worker serving it,
//     so more workers (in any process) share the calls;
//   - the worker never takes more calls than it has free slots
//     (Config.Concurrency), and drops a call whose deadline has passed;
//   - a running idempotent call sends heartbeats, so the server redelivers it
//     to another worker only when this one dies; a call of a tool that is not
//     idempotent is claimed before it runs and is never run twice;
//   - a call of a tool that requires approval runs only with an operator's
//     approval proof, which the worker checks itself;
//   - arguments are validated against the tool's schema again, the tool
//     runs under its deadline with panics recovered and output bounded
//     (pkg/harness), and results of one run that finish together share a
//     message;
//   - the worker takes no calls while the fleet's streams differ from their
//     expected configuration, and refuses to start when they do at start;
//   - when Run's context ends, the worker stops pulling, waits for calls in
//     flight (Config.ShutdownGrace) and acknowledges them.
//
// Metrics are registered on Config.Metrics when set. Traces are recorded when
// the program installs an OpenTelemetry tracer provider
// (otel.SetTracerProvider): the worker's spans join the coordinator's trace.
//
// Typed Go tools come from pkg/tool; exec tools from a manifest from
// harness.LoadManifest; MCP servers' tools through Config.MCPServers.
package worker
