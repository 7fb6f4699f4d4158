// Package toolworker wires a toolworker: a NATS connection, the fleet's
// streams, a harness built from a tool manifest and built-in tools, the
// catalog entries of those tools and a [natsbus.Worker] serving them.
//
// [Run] is the whole program behind cmd/toolworker. [New] builds a worker
// on a connection the caller owns, which is how the coordinator runs
// in-process workers on its embedded server.
package toolworker
