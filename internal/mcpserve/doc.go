// Package mcpserve serves the fleet's live catalog as an MCP server, over
// stdio or streamable HTTP (stateless, so any replica answers any request).
//
// Every tools/call is a run of the ReAct loop with exactly one call, made by
// a model that only repeats the client's request: it goes through the
// loop's path unchanged — validation against the catalog's schema, the
// approval gate (the client waits; a denial or an expiry is the call's
// result), dispatch to a worker, the deadline, outcome_unknown, metrics and
// logs. An ok outcome is the tool's output; every other outcome is an
// isError result carrying the observation the model would have seen, and
// the outcome in _meta ("toolfleet/outcome").
//
// When the client sends a progressToken, the call reports its stages as
// progress notifications (waiting for approval, started on a worker) and a
// heartbeat while it runs.
package mcpserve
