// Package examples holds the examples of toolfleet as a Go library, each
// built and run by this package's tests:
//
//   - toolworker: a tool-worker binary serving two typed Go tools, one not
//     idempotent and one gated by an operator's approval;
//   - agentservice: a service that embeds the runner and serves one agent
//     over HTTP;
//   - agenttest: a separate Go module (its own go.mod, importing toolfleet
//     through a replace directive, so it can reach nothing internal) with an
//     end-to-end test of an agent, written as a user writes it.
package examples
