// Package looptest provides in-memory implementations of the loop's
// interfaces for tests, as net/http/httptest does for HTTP: a scripted
// [Model] that refuses invalid transcripts the way real model APIs do, a
// [Dispatcher] that runs each published call in a goroutine, a static
// [Catalog] and a func-field [Gate].
//
// Every loop test that uses [Model] therefore also proves that the
// transcript the loop sends is valid: each assistant tool call answered by
// exactly one tool message, in request order.
//
// # Caveats
//
// The Dispatcher checks every call and cancel with the protocol's own
// Validate and refuses publishes for runs without an open inbox, so tests
// catch a loop that sends malformed calls or publishes before opening.
package looptest
