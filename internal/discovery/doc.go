// Package discovery finds a fleet's live workers and the tools they
// disagree on, over NATS micro: every natsbus.Worker registers a micro
// service named natsbus.ServiceName, whose metadata names the worker and
// its tools and whose per-tool endpoints carry each tool's schema digest,
// timeout and flags. It is kept apart from the JetStream transport
// (natsbus), as nats.go keeps micro apart from jetstream; it reads the
// catalog bucket only to compare the live workers with it.
//
// [Discover] asks the live workers what they serve; [FindSchemaConflicts]
// finds tools whose live workers disagree on the schema, with each other
// or all of them with the catalog. A coordinator runs a [SchemaMonitor],
// which checks when a catalog spec changes to another digest and
// periodically, and logs and counts each conflict. The coordinator keeps
// offering the tool with the catalog's (latest) spec: calls are validated
// against it, and each worker validates them again against its own, so a
// worker on another schema answers invalid_arguments instead of running
// arguments it does not understand. Nothing is silently mixed; the
// operator is told which workers to upgrade or stop.
package discovery
