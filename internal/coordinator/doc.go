// Package coordinator wires a coordinator process together: it connects to
// NATS (or starts an embedded JetStream server with in-process toolworkers),
// serves metrics and probes, and runs the ReAct loop through pkg/runner,
// which makes sure the fleet's streams exist, reads the tool catalog and
// runs the loop over the NATS dispatcher and approval gate; coordinator
// mcp runs its calls on the same runner's fleet ([Coordinator.Fleet]).
//
// cmd/coordinator is a thin main over this package; e2e tests and
// benchmarks use it directly.
//
// # Serving runs
//
// [Coordinator.Run] runs one prompt. [Coordinator.Serve] serves runs
// submitted by others: it is pkg/serve on the coordinator's connection,
// with its model, loop limits (the ceilings), metrics and logger (see the
// serve package for how runs are taken, resumed, handed off and
// answered). [Submit] and [WaitResult] are the submitting side the tests
// and fleetbench use.
package coordinator
