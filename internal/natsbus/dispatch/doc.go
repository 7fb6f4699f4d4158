// Package dispatch is the coordinator's NATS transport. A [Dispatcher]
// publishes a run's calls to the calls stream, holding a call the stream
// refuses for its client's share until the share frees, and reads the
// results of all its runs back from the results stream through one
// ordered consumer, handing each to its run's [Inbox]. An inbox delivers
// results and progress to pkg/loop, withdraws a non-idempotent call at its
// deadline (a start record, package stores), and catches up on results
// stored before it opened when a run resumes.
package dispatch
