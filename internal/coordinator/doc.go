// Package coordinator wires a coordinator process together: it connects to
// NATS (or starts an embedded JetStream server with in-process toolworkers),
// makes sure the fleet's streams exist, reads the tool catalog, and runs the
// ReAct loop of pkg/loop over the NATS dispatcher and approval gate.
//
// cmd/coordinator is a thin main over this package; e2e tests and
// benchmarks use it directly.
package coordinator
