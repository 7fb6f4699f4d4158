// Package examples holds the examples of toolfleet as a Go library, each
// built and run by this package's tests:
//
//   - toolworker: a tool-worker binary serving two typed Go tools, one not
//     idempotent and one gated by an operator's approval;
//   - agentservice: a service that embeds the runner and serves one agent
//     over HTTP;
//   - fleetservice: a service serving its own agents and tools in one
//     process (pkg/serve and pkg/worker): the runs clients submit, with a
//     scripted model of its own, built and run as a process by its test;
//   - agenttest: a separate Go module (its own go.mod, importing toolfleet
//     through a replace directive, so it can reach nothing internal) with
//     end-to-end tests of an agent, written as a user writes them: one
//     on a runner, one on a fleet serving its agents (a run submitted as a
//     client, its approval awaited and approved, its result read by call id).
package examples
