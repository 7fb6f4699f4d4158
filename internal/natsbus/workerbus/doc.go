// Package workerbus is the toolworker's NATS transport: a [Worker] pulls
// its tools' calls from the calls stream (through a workqueue.WorkQueue
// per tool and class), checks and runs each in the harness, claims a
// non-idempotent call before it runs (a start record, package stores),
// stores the result, settles the delivery, reports progress and registers
// itself for discovery.
//
// # Worker invariants
//
//   - A worker never pulls more calls than it has free execution slots: the
//     ack timer of a buffered call would run while nobody works on it.
//   - A call whose deadline has passed is terminated, never run.
//   - A non-idempotent tool's call is claimed before it runs — removed
//     from the calls stream, which the server does once, so of two
//     deliveries of one call (a redelivery after the first worker stalled
//     past the ack wait) only one runs it: at most once. An ack cannot
//     decide this, as the server confirms an ack of a message another
//     delivery already acknowledged. An idempotent tool's call is
//     acknowledged after its result is stored, with in-progress heartbeats
//     while it runs: at least once; a worker that is redelivered a call it
//     is still running does not start it again.
//   - A pull ends when the server ends it, so a call the server sends is
//     never dropped by a client that stopped waiting first.
//   - A result is published only on <prefix>.result.<run> of the call's own
//     run, whatever the call's headers say.
//   - Results of one run's calls to one tool may share a message, a
//     [protocol.ResultBatch], only when the calls carry
//     protocol.HeaderResultBatch (a dispatch.Dispatcher sets it: its inboxes read
//     batches, up to its MaxMessageBytes). A result whose subject has no
//     message awaiting its PubAck is published alone at once; those
//     finishing while one is wait for it and go out together, within the
//     size the calls allow, the worker's MaxMessageBytes, the server's
//     max_payload and 64 results. Each call is settled on the PubAck of
//     the message that carried its result; a batch that fails is
//     published again result by result.
//   - Logs carry subjects, tool names, run ids, call keys, outcomes,
//     durations and error codes; never arguments, outputs or payloads.
//
// # Discovery and schema conflicts
//
// Every [Worker] registers a NATS micro service named [ServiceName]
// ("toolworker") while it runs, so "nats micro ls" lists the fleet's
// workers and "nats micro info toolworker ID" shows one: its name, prefix
// and tools in the service metadata, and one endpoint per tool whose
// metadata holds the tool's JSON Schema, schema digest, timeout,
// idempotent and requires_approval flags. The endpoints listen on
// <prefix>.tool.<tool> and answer a request with the worker's spec of the
// tool (every worker answers: no queue group); calls never travel there.
// The endpoints' own request counts are therefore tool-info requests: the
// worker's real per-tool call counts are each endpoint's stats data
// ([ToolStats]).
//
// Package internal/discovery reads these services: it finds the live
// workers and the tools whose workers disagree on a schema.
//
// # Caveats
//
// Worker settings that live on the shared consumer (AckWait, MaxDeliver,
// the tool's MaxAckPending) are fleet-wide: the last worker to start
// decides them. A spec stays in the catalog after the last worker serving
// the tool stops; calls to it then time out at their deadline.
//
// Started notices (protocol.Started, on the progress subject) and cancels
// travel on core NATS. A worker sends a started notice only when the
// call's protocol.HeaderStartedNotice asks for it: the Dispatcher asks for
// none unless the call asks (loop.Outgoing.StartedNotices), as its
// inboxes learn whether a non-idempotent call started by withdrawing it at
// its deadline (Inbox.Withdraw, which fails only when a worker claimed
// it). A started notice sent while the coordinator is disconnected is
// lost; nothing but progress shown to a client depends on it. A cancel
// sent while a worker is disconnected is lost; the call still ends at its
// deadline.
package workerbus
