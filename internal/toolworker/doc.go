// Package toolworker wires a toolworker: a NATS connection, the fleet's
// streams, a harness built from Go tools, a tool manifest, built-in tools
// and MCP servers, the catalog entries of those tools and a
// [natsbus.Worker] serving them.
//
// [New] builds a worker on a connection the caller owns: pkg/worker (which
// cmd/toolworker is built on) is a facade over it, and the coordinator runs
// its in-process workers with it. [Run] connects and serves on its own,
// with a metrics server, as the tests of this package use it.
package toolworker
