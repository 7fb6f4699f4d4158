// Package bustest starts a test fleet for the transport's tests: an
// embedded nats-server with the fleet's streams ([NewFleet]), workers
// over a harness, dispatchers and runs, and waits on what they do. Only
// tests import it.
package bustest
