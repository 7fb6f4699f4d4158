// Package e2e holds toolfleet's end-to-end tests. They build the real
// coordinator and toolworker commands once (with the race detector when cgo
// is available) and run them as separate processes against a real
// nats-server, with the scripted model and exec tools that record every run
// in a file, so a test can assert both on the coordinator's JSON result and
// on how many times each call really ran.
//
// The scenarios are the fleet's failure semantics (docs/failure-semantics.md):
// dead workers, a restarted server, a partitioned coordinator, an
// interrupted coordinator, tools nobody serves, hostile messages on every
// subject, and load.
//
// Run them with
//
//	go test -race ./e2e/
//
// Every wait is a poll with a deadline and every deadline is short. TestMain
// builds the binaries once into a temporary directory (see bins).
//
// Most tests call t.Parallel: each starts its own nats-server on a random
// port with its store, manifests and logs in its own t.TempDir(), and its
// own processes, and spends most of its time waiting on them (process
// starts, ack waits, deadlines). The few that do not say why: they measure
// this process, bound how long something takes, keep both cores busy, or
// wait a bounded time for a cluster's elections.
package e2e
